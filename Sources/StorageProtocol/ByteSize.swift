import Foundation

/// Sizes as people write them on command lines: `512`, `64K`, `100M`, `2G`, `1T` (powers of 1024; `KiB`/`KB` alike).
public enum ByteSize {
    public static func parse(_ text: String) -> Int64? {
        let t = text.trimmingCharacters(in: .whitespaces)
        let digits = t.prefix { $0.isNumber || $0 == "." }
        guard let value = Double(digits), value >= 0 else { return nil }
        let unit = t.dropFirst(digits.count).trimmingCharacters(in: .whitespaces).lowercased()
        let shift: Int
        switch unit {
        case "", "b": shift = 0
        case "k", "kb", "kib": shift = 10
        case "m", "mb", "mib": shift = 20
        case "g", "gb", "gib": shift = 30
        case "t", "tb", "tib": shift = 40
        default: return nil
        }
        let bytes = value * Double(Int64(1) << shift)
        guard bytes < 9.2e18 else { return nil }
        return Int64(bytes)
    }

    /// `1.5 GiB`, `12.0 MiB`, `512 B`.
    public static func format(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = Double(bytes)
        var i = 0
        while v >= 1024 && i < units.count - 1 {
            v /= 1024
            i += 1
        }
        return i == 0 ? "\(bytes) B" : String(format: "%.1f %@", v, units[i])
    }
}
