#ifndef SPOOL_CCRYPTO_SHIM_H
#define SPOOL_CCRYPTO_SHIM_H

// The system's libcrypto (OpenSSL 3, libssl-dev on Debian/Ubuntu): AES-256-GCM
// and its random source, for sealed values on platforms without CryptoKit.
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#endif
