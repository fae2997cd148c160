/// The stable bucket of ``SurveyCondition/sampled(percent:)``: a number from
/// 0 up to (not including) 100 for an anonymous id and a survey id, the same
/// in every process and at every launch.
///
/// Not Swift's `Hasher`, which is seeded anew in each process: the 64-bit
/// FNV-1a hash of the UTF-8 bytes of the anonymous id, one zero byte and the
/// survey id, passed through the SplitMix64 finalizer (FNV-1a alone leaves
/// the high bits of short, similar keys close together), whose top 53 bits
/// are divided by 2⁵³ and multiplied by 100.
enum SampleBucket {
    static func of(anonymousID: String, surveyID: String) -> Double {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func add(_ byte: UInt8) {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        for byte in anonymousID.utf8 { add(byte) }
        add(0)
        for byte in surveyID.utf8 { add(byte) }
        var mixed = hash
        mixed = (mixed ^ (mixed >> 30)) &* 0xbf58_476d_1ce4_e5b9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94d0_49bb_1331_11eb
        mixed ^= mixed >> 31
        return Double(mixed >> 11) / 9_007_199_254_740_992 * 100
    }
}
