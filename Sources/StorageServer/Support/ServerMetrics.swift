import Prometheus

/// The Prometheus metrics of one server (a registry per server, so that tests can run several).
final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    let bytesReceived: Counter
    let bytesSent: Counter
    let directReads: Counter
    let uploadsStarted: Counter
    let uploadsCompleted: Counter
    let gcDeletedBlobs: Counter
    let gcExpiredUploads: Counter
    let requestDuration: DurationHistogram

    private static func name(_ metric: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "stowd", metricName: metric, unitName: unit, helpText: help)
    }

    init() {
        bytesReceived = registry.makeCounter(descriptor: Self.name("bytes_received", "total", "Bytes of file content received."))
        bytesSent = registry.makeCounter(descriptor: Self.name("bytes_sent", "total", "Bytes of file content sent."))
        directReads = registry.makeCounter(descriptor: Self.name("direct_reads", "total", "Downloads redirected to a presigned GET of the object store."))
        uploadsStarted = registry.makeCounter(descriptor: Self.name("uploads_started", "total", "Uploads started."))
        uploadsCompleted = registry.makeCounter(descriptor: Self.name("uploads_completed", "total", "Uploads completed (files published)."))
        gcDeletedBlobs = registry.makeCounter(descriptor: Self.name("gc_deleted_blobs", "total", "Blobs deleted by the garbage collector."))
        gcExpiredUploads = registry.makeCounter(descriptor: Self.name("gc_expired_uploads", "total", "Abandoned uploads deleted."))
        requestDuration = registry.makeDurationHistogram(
            descriptor: Self.name("http_request_duration", "seconds", "Time to answer a request (until the head of the answer)."),
            buckets: [.milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100), .milliseconds(500), .seconds(2), .seconds(10)])
    }

    func countRequest(method: String, route: String, status: Int) {
        registry.makeCounter(
            descriptor: Self.name("http_requests", "total", "HTTP requests answered."),
            labels: [("method", method), ("route", route), ("status", String(status))]
        ).increment()
    }

    var text: String { registry.emitToString() }
}
