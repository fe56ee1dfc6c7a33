/// Numbers that arrive from the network in headers and query strings.
///
/// Every such number is hostile until parsed: `Int64("+5")` and `Int64("-0")` succeed, and a
/// value near `Int64.max` overflows the first sum it meets. These parsers take decimal digits
/// only (no sign, no spaces, no leading `+`), at most what an `Int64` holds, and give `nil` for
/// anything else, so the caller answers 400. Sums of such numbers go through `sum`, which says
/// `nil` instead of trapping.
public enum HTTPNumber {
    /// A non-negative decimal integer, or `nil`.
    ///
    /// ```swift
    /// HTTPNumber.nonNegative("1024")                 // 1024
    /// HTTPNumber.nonNegative("9223372036854775808")  // nil: past Int64.max
    /// HTTPNumber.nonNegative("+5")                   // nil
    /// ```
    public static func nonNegative<S: StringProtocol>(_ text: S?) -> Int64? {
        guard let text, !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(text)
    }

    /// `a + b`, or `nil` where it would overflow.
    public static func sum(_ a: Int64, _ b: Int64) -> Int64? {
        let (value, overflow) = a.addingReportingOverflow(b)
        return overflow ? nil : value
    }
}
