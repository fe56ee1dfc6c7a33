/// Bytes as hex digits, two per byte. Written by hand: `String(format: "%02x")` per byte went
/// through Foundation's formatter and was ~13% of `stowd`'s CPU while it stored small files
/// (digests and ids, several per file).
public enum Hex {
    private static let lower = Array("0123456789abcdef".utf8)
    private static let upper = Array("0123456789ABCDEF".utf8)

    /// Lowercase hex of `bytes`.
    public static func lowercase(_ bytes: some Sequence<UInt8>) -> String {
        encode(bytes, lower)
    }

    /// Uppercase hex of `bytes`.
    public static func uppercase(_ bytes: some Sequence<UInt8>) -> String {
        encode(bytes, upper)
    }

    /// `count` random bytes as lowercase hex (ids, tokens).
    /// Eight bytes per draw from the system's generator (`getrandom`): drawn byte by byte, an id of
    /// 16 bytes took 16 system calls.
    public static func random(bytes count: Int) -> String {
        var rng = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            withUnsafeBytes(of: rng.next() as UInt64) { bytes.append(contentsOf: $0) }
        }
        return lowercase(bytes.prefix(count))
    }

    private static func encode(_ bytes: some Sequence<UInt8>, _ digits: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
