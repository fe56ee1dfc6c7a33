/// The read-ahead window of one open file: it grows while reads stay sequential and falls back
/// to nothing on a jump (mountpoint-s3's prefetcher does the same).
///
/// A value type with one event and one answer, so it is tested without I/O.
public struct ReadAhead: Sendable, Equatable {
    /// Where the next sequential read would start.
    public private(set) var expectedOffset: Int64 = 0
    /// Blocks to keep fetched ahead of the reader.
    public private(set) var window: Int = 0
    public let maxWindow: Int

    public init(maxWindow: Int) { self.maxWindow = max(1, maxWindow) }

    /// A read of `length` bytes at `offset` happened. Returns how many blocks after it to prefetch.
    public mutating func read(offset: Int64, length: Int) -> Int {
        if offset == expectedOffset || (window > 0 && offset > expectedOffset - Int64(length) && offset <= expectedOffset + Int64(length)) {
            window = window == 0 ? 1 : min(maxWindow, window * 2)
        } else if offset == 0 {
            window = 1
        } else {
            window = 0
        }
        expectedOffset = offset + Int64(length)
        return window
    }
}
