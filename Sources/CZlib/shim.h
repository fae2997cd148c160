#ifndef SPOOL_CZLIB_SHIM_H
#define SPOOL_CZLIB_SHIM_H

#include <zlib.h>

/// deflateInit2 and inflateInit2 are macros that pass ZLIB_VERSION and
/// sizeof(z_stream); Swift cannot import function-like macros, so these
/// wrappers call them with the header's own values.

/// A deflate stream that writes one gzip member (windowBits 15 + 16: a gzip
/// header and trailer instead of zlib's), memLevel 8, the default strategy.
static inline int spool_deflate_init_gzip(z_stream *stream, int level) {
    return deflateInit2(stream, level, Z_DEFLATED, MAX_WBITS + 16, 8, Z_DEFAULT_STRATEGY);
}

/// An inflate stream that reads gzip only (windowBits 15 + 16).
static inline int spool_inflate_init_gzip(z_stream *stream) {
    return inflateInit2(stream, MAX_WBITS + 16);
}

#endif
