import CZlib
import Foundation

/// gzip (RFC 1952) through the system zlib: request bodies for
/// `Content-Encoding: gzip`.
package enum Gzip {
    /// zlib level 1. On a batch of 100 varied events in Spool's format it
    /// keeps 6.6× of level 6's 8.1× shrink (51 against 41 bytes per event)
    /// for a third of the CPU (1.6 against 4.4 µs per event): the upload
    /// drain is bound by this CPU, the radio by bytes that level 1 already
    /// cut by 85%.
    package static let defaultLevel: Int32 = 1

    /// One gzip member holding `bytes`, or nil if zlib fails (out of memory;
    /// the caller sends the body uncompressed).
    ///
    /// An empty input gives a valid 20-byte member, not an empty result.
    package static func compress(_ bytes: some ContiguousBytes, level: Int32 = defaultLevel) -> Data? {
        bytes.withUnsafeBytes { input -> Data? in
            // Inputs are request bodies (a few MB at most); zlib counts in
            // 32-bit unsigned integers.
            guard input.count <= Int(UInt32.max) else { return nil }
            var stream = z_stream()
            guard spool_deflate_init_gzip(&stream, level) == Z_OK else { return nil }
            defer { deflateEnd(&stream) }
            // deflateBound is exact for one Z_FINISH call: no output loop.
            let capacity = Int(deflateBound(&stream, uLong(input.count)))
            var output = Data(count: capacity)
            let status = output.withUnsafeMutableBytes { out -> Int32 in
                // zlib never writes through next_in (its header declares it
                // without const unless ZLIB_CONST is defined).
                // nil for an empty input: zlib reads nothing when avail_in is 0.
                stream.next_in = UnsafeMutablePointer(mutating: input.bindMemory(to: Bytef.self).baseAddress)
                stream.avail_in = uInt(input.count)
                stream.next_out = out.bindMemory(to: Bytef.self).baseAddress
                stream.avail_out = uInt(out.count)
                defer {
                    stream.next_in = nil
                    stream.next_out = nil
                }
                return deflate(&stream, Z_FINISH)
            }
            guard status == Z_STREAM_END else { return nil }
            output.count = Int(stream.total_out)
            return output
        }
    }

    /// The bytes inside a gzip stream (concatenated members included), or
    /// nil when it is not valid gzip or would inflate past `limit` bytes.
    package static func decompress(_ bytes: some ContiguousBytes, limit: Int = 64 << 20) -> Data? {
        bytes.withUnsafeBytes { input -> Data? in
            guard input.count <= Int(UInt32.max), input.count > 0 else { return nil }
            var output = Data()
            var stream = z_stream()
            guard spool_inflate_init_gzip(&stream) == Z_OK else { return nil }
            defer { inflateEnd(&stream) }
            var chunk = [UInt8](repeating: 0, count: 64 * 1_024)
            var consumed = 0
            while true {
                let (status, produced, used) = chunk.withUnsafeMutableBytes { out -> (Int32, Int, Int) in
                    let remaining = UnsafeRawBufferPointer(rebasing: input[consumed...])
                    stream.next_in = UnsafeMutablePointer(
                        mutating: remaining.bindMemory(to: Bytef.self).baseAddress)
                    stream.avail_in = uInt(remaining.count)
                    stream.next_out = out.bindMemory(to: Bytef.self).baseAddress
                    stream.avail_out = uInt(out.count)
                    defer {
                        stream.next_in = nil
                        stream.next_out = nil
                    }
                    let status = inflate(&stream, Z_NO_FLUSH)
                    return (status, out.count - Int(stream.avail_out), remaining.count - Int(stream.avail_in))
                }
                consumed += used
                output.append(contentsOf: chunk[0..<produced])
                guard output.count <= limit else { return nil }
                switch status {
                case Z_STREAM_END:
                    // Another member may follow.
                    guard consumed < input.count else { return output }
                    guard inflateReset(&stream) == Z_OK else { return nil }
                case Z_OK:
                    // No progress with input left over means a stuck stream.
                    guard produced > 0 || used > 0 else { return nil }
                    guard consumed < input.count || produced == chunk.count else { return nil }  // truncated
                default:
                    return nil
                }
            }
        }
    }
}
