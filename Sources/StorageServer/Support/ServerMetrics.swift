import Prometheus

/// The Prometheus metrics of one server (a registry per server, so that tests can run several).
final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    let bytesReceived: Counter
    let bytesSent: Counter
    let directReads: Counter
    let localReads: Counter
    let uploadsStarted: Counter
    let uploadsCompleted: Counter
    let gcDeletedBlobs: Counter
    let gcExpiredUploads: Counter

    private static func name(_ metric: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "stowd", metricName: metric, unitName: unit, helpText: help)
    }

    init() {
        bytesReceived = registry.makeCounter(descriptor: Self.name("bytes_received", "total", "Bytes of file content received."))
        bytesSent = registry.makeCounter(descriptor: Self.name("bytes_sent", "total", "Bytes of file content sent."))
        directReads = registry.makeCounter(descriptor: Self.name("direct_reads", "total", "Downloads redirected to a presigned GET of the object store."))
        localReads = registry.makeCounter(descriptor: Self.name("local_reads", "total", "Downloads answered with the blob file's path, for a client on this machine."))
        uploadsStarted = registry.makeCounter(descriptor: Self.name("uploads_started", "total", "Uploads started."))
        uploadsCompleted = registry.makeCounter(descriptor: Self.name("uploads_completed", "total", "Uploads completed (files published)."))
        gcDeletedBlobs = registry.makeCounter(descriptor: Self.name("gc_deleted_blobs", "total", "Blobs deleted by the garbage collector."))
        gcExpiredUploads = registry.makeCounter(descriptor: Self.name("gc_expired_uploads", "total", "Abandoned uploads deleted."))
    }

    static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    static let durationBuckets: [Duration] = [
        .microseconds(250), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(5), .seconds(10),
    ]

    /// One answered request: counted by method, route (the pattern, e.g. `/tus/files/{id}`, never
    /// the path a client sent) and status; its time in a histogram per method and route.
    func countRequest(method: String, route: String, status: Int, duration: Duration) {
        // A client picks the method: any it likes would make a series of its own.
        let method = Self.methods.contains(method) ? method : "other"
        registry.makeCounter(
            descriptor: Self.name("http_requests", "total", "HTTP requests answered."),
            labels: [("method", method), ("route", route), ("status", String(status))]
        ).increment()
        registry.makeDurationHistogram(
            descriptor: Self.name("http_request_duration", "seconds", "Time to answer a request (until the head of the answer), per route."),
            labels: [("method", method), ("route", route)],
            buckets: Self.durationBuckets
        ).record(duration)
    }

    var text: String { registry.emitToString() }
}
