import CoreMetrics
import FuseKit
import Prometheus
import StowFS
import Synchronization

/// The Prometheus metrics of one mount (`stowfs mount --metrics ADDR`): every kernel request timed
/// per operation, the bytes read and written through the mount, and, read from the engine when
/// scraped, the upload queue, the uploads done and failed, and the block cache.
///
/// Instruments are swift-metrics types made by a Prometheus factory over a registry of this mount's
/// own (not the process-wide `MetricsSystem`), so tests can run several mounts in one process.
final class MountMetrics: FuseObserver {
    let registry = PrometheusCollectorRegistry()
    private let durations: [FuseOperation: CoreMetrics.Timer]
    private let errors: [FuseOperation: CoreMetrics.Counter]
    private let bytesRead: CoreMetrics.Counter
    private let bytesWritten: CoreMetrics.Counter
    private let queueFiles: CoreMetrics.Gauge
    private let queueBytes: CoreMetrics.Gauge
    private let uploading: CoreMetrics.Gauge
    private let refused: CoreMetrics.Gauge
    private let uploadsStored: CoreMetrics.Counter
    private let uploadedBytes: CoreMetrics.Counter
    private let failedAttempts: CoreMetrics.Counter
    private let cacheHits: CoreMetrics.Counter
    private let cacheMisses: CoreMetrics.Counter
    private let cacheBytes: CoreMetrics.Gauge
    /// What the engine's own totals were at the last scrape: counters move by the difference.
    private let seen = Mutex(Totals())

    private struct Totals {
        var stored = 0
        var uploadedBytes: Int64 = 0
        var failedAttempts = 0
        var hits: UInt64 = 0
        var misses: UInt64 = 0
    }

    /// From 50 µs (a cached getattr) to 10 s (a close that waits for a slow server).
    static let buckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .seconds(2), .seconds(5), .seconds(10),
    ]

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = Self.buckets
        var durations: [FuseOperation: CoreMetrics.Timer] = [:]
        var errors: [FuseOperation: CoreMetrics.Counter] = [:]
        for op in FuseOperation.allCases {
            durations[op] = CoreMetrics.Timer(label: "stowfs_fuse_request_duration_seconds", dimensions: [("op", op.rawValue)], factory: factory)
            errors[op] = CoreMetrics.Counter(label: "stowfs_fuse_errors_total", dimensions: [("op", op.rawValue)], factory: factory)
        }
        self.durations = durations
        self.errors = errors
        bytesRead = CoreMetrics.Counter(label: "stowfs_read_bytes_total", factory: factory)
        bytesWritten = CoreMetrics.Counter(label: "stowfs_written_bytes_total", factory: factory)
        queueFiles = CoreMetrics.Gauge(label: "stowfs_queue_files", factory: factory)
        queueBytes = CoreMetrics.Gauge(label: "stowfs_queue_bytes", factory: factory)
        uploading = CoreMetrics.Gauge(label: "stowfs_uploads_in_flight", factory: factory)
        refused = CoreMetrics.Gauge(label: "stowfs_uploads_refused", factory: factory)
        uploadsStored = CoreMetrics.Counter(label: "stowfs_uploads_stored_total", factory: factory)
        uploadedBytes = CoreMetrics.Counter(label: "stowfs_uploaded_bytes_total", factory: factory)
        failedAttempts = CoreMetrics.Counter(label: "stowfs_upload_failures_total", factory: factory)
        cacheHits = CoreMetrics.Counter(label: "stowfs_cache_hits_total", factory: factory)
        cacheMisses = CoreMetrics.Counter(label: "stowfs_cache_misses_total", factory: factory)
        cacheBytes = CoreMetrics.Gauge(label: "stowfs_cache_bytes", factory: factory)
    }

    func finished(_ operation: FuseOperation, after: Duration, errno: Int32, bytes: Int) {
        durations[operation]?.recordNanoseconds(Int64(after.components.seconds) * 1_000_000_000 + after.components.attoseconds / 1_000_000_000)
        if errno != 0 { errors[operation]?.increment() }
        if bytes > 0 {
            if operation == .read { bytesRead.increment(by: bytes) } else if operation == .write { bytesWritten.increment(by: bytes) }
        }
    }

    /// The exposition text, after bringing what the engine counts up to date.
    func scrape(_ engine: StowFileSystem) async -> String {
        let status = await engine.status()
        let q = status.queue
        queueFiles.record(q.files)
        queueBytes.record(q.bytes)
        uploading.record(q.uploading)
        refused.record(q.failed)
        cacheBytes.record(status.cache.bytes)
        let now = Totals(
            stored: q.uploadedFiles, uploadedBytes: q.uploadedBytes, failedAttempts: q.failedAttempts ?? 0,
            hits: status.cache.hits, misses: status.cache.misses)
        // Each total only moves forward, so two scrapes at once (the later one may have read older
        // totals) never count a difference twice.
        let delta = seen.withLock { s in
            let d = Totals(
                stored: max(0, now.stored - s.stored), uploadedBytes: max(0, now.uploadedBytes - s.uploadedBytes),
                failedAttempts: max(0, now.failedAttempts - s.failedAttempts),
                hits: now.hits > s.hits ? now.hits - s.hits : 0, misses: now.misses > s.misses ? now.misses - s.misses : 0)
            s = Totals(
                stored: max(s.stored, now.stored), uploadedBytes: max(s.uploadedBytes, now.uploadedBytes),
                failedAttempts: max(s.failedAttempts, now.failedAttempts), hits: max(s.hits, now.hits), misses: max(s.misses, now.misses))
            return d
        }
        uploadsStored.increment(by: delta.stored)
        uploadedBytes.increment(by: Int(delta.uploadedBytes))
        failedAttempts.increment(by: delta.failedAttempts)
        cacheHits.increment(by: Int(delta.hits))
        cacheMisses.increment(by: Int(delta.misses))
        return registry.emitToString()
    }
}
