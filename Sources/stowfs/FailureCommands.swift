import ArgumentParser
import Foundation
import MountService
import StowFS

/// Paths inside StowFS mounts, grouped by mount (mountpoint → paths inside it).
func pathsByMount(_ paths: [String]) -> [(mountpoint: String, inside: [String])] {
    var order: [String] = []
    var groups: [String: [String]] = [:]
    for p in paths {
        guard let (m, inside) = MountPaths.resolve(p) else { fail("\(p) is not inside a StowFS mount") }
        if groups[m] == nil { order.append(m) }
        groups[m, default: []].append(inside)
    }
    return order.map { ($0, groups[$0]!) }
}

struct Retry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send uploads the server refused again, now.",
        discussion: """
            PATH is a file or folder inside a mount, or a mountpoint (every failed upload in it);
            without one, every failed upload of the mount the current folder is in. Returns once they
            are queued; `stowfs sync` waits for them (and retries failed uploads itself).
            """)

    @Argument(help: "Files, folders or mountpoints.")
    var paths: [String] = []

    func run() async throws {
        for (mountpoint, inside) in pathsByMount(paths.isEmpty ? ["."] : paths) {
            let all = inside.contains("")
            let box = StatusBox()
            do {
                try await ControlClient.send(ControlRequest(command: "retry", paths: all ? [] : inside), mountpoint: mountpoint) { box.set($0) }
            } catch {
                fail("\(error)")
            }
            if let e = box.value?.error { fail(e) }
            print("\(mountpoint): \(box.value?.count ?? 0) failed upload(s) sent again")
        }
    }
}

struct Discard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drop the local changes the server refused.",
        discussion: """
            For each PATH (a file or folder inside a mount) whose upload the server refused for good,
            its queued uploads and local copy are dropped: the mount shows what the server has (the
            previous content, or no file if the server never had one). Nothing else is touched; a file
            open for writing is left alone. This is the only way a refused change is ever dropped.
            """)

    @Argument(help: "Files or folders inside a mount.")
    var paths: [String]

    func validate() throws {
        guard !paths.isEmpty else { throw ValidationError("name the files (or folders) whose refused changes to drop") }
    }

    func run() async throws {
        for (mountpoint, inside) in pathsByMount(paths) {
            let box = StatusBox()
            do {
                try await ControlClient.send(ControlRequest(command: "discard", paths: inside.map { $0.isEmpty ? "." : $0 }), mountpoint: mountpoint) {
                    box.set($0)
                }
            } catch {
                fail("\(error)")
            }
            if let e = box.value?.error { fail(e) }
            let dropped = box.value?.discarded ?? []
            if dropped.isEmpty { print("\(mountpoint): nothing refused there; nothing dropped") }
            for d in dropped { print("dropped the refused change of \(d)") }
        }
    }
}
