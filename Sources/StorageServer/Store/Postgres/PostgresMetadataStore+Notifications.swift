import Logging
import PostgresNIO

/// Hints from the other replicas, through `LISTEN`: the triggers of `PostgresSchema.lockNotifications`
/// notify `stowd_locks_<md5 of the schema>` when a lock transaction commits. One connection of its
/// own per replica (outside the pool, which it would hold forever), named `stowd listen <schema>` in
/// `pg_stat_activity`. When it breaks, `.lost` is
/// reported and it connects again, after 0.1 s doubling to 5 s; the waits' polls
/// (`lockPollInterval`) cover the gap.
extension PostgresMetadataStore {
    public func followOtherServers(_ event: @escaping @Sendable (OtherServersEvent) -> Void) async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(
                    configuration: try singleConnectionConfiguration(applicationName: "stowd listen " + (location.schema ?? "public")), id: 1, logger: logger)
                let lost = await withTaskCancellationHandler {
                    do {
                        // The schema the tables are in, as the trigger's TG_TABLE_SCHEMA names it.
                        let rows = try await connection.query(
                            """
                            SELECT md5(n.nspname) AS h FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE c.oid = 'lock_sets'::regclass
                            """, logger: logger
                        ).collect()
                        guard let hash = try rows.first?.decode(String.self) else { return true }
                        try await connection.listen(on: "stowd_locks_" + hash) { notifications in
                            // Listening from here on: what happened before was not heard.
                            event(.lost)
                            delay = .milliseconds(100)
                            for try await _ in notifications { event(.locks) }
                        }
                        return !Task.isCancelled
                    } catch {
                        if !Task.isCancelled { logger.warning("listening for other replicas' lock changes: \(error); polling meanwhile") }
                        return true
                    }
                } onCancel: {
                    Task { try? await connection.close() }
                }
                try? await connection.close()
                guard lost else { return }
            } catch {
                logger.debug("cannot connect to listen for other replicas' lock changes: \(error)")
            }
            event(.lost)
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(5))
        }
    }
}
