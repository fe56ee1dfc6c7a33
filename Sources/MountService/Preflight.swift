import Foundation
import StowFS
public import StorageClient
public import StorageProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Checks made before mounting, each failing with the problem and its fix.
public enum Preflight {
    public static func checkMountpoint(_ path: String, allowNonEmpty: Bool) throws(MountProblem) {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw MountProblem("the mountpoint \(path) does not exist", fix: "create it: mkdir -p \(path)")
        }
        guard isDir.boolValue else { throw MountProblem("the mountpoint \(path) is not a folder", fix: "mount on an empty folder") }
        if isMounted(path) {
            throw MountProblem("\(path) is already mounted", fix: "see `stowfs status \(path)`, or unmount it first: stowfs unmount \(path)")
        }
        if !allowNonEmpty, let entries = try? FileManager.default.contentsOfDirectory(atPath: path), !entries.isEmpty {
            throw MountProblem("the mountpoint \(path) is not empty (\(entries.count) entries)", fix: "mount on an empty folder, or pass -o nonempty")
        }
    }

    public static func checkFuse() throws(MountProblem) {
        guard FileManager.default.fileExists(atPath: "/dev/fuse") else {
            throw MountProblem(
                "/dev/fuse is missing", fix: "load the FUSE module (sudo modprobe fuse); in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN")
        }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw MountProblem("/dev/fuse is not usable by this user", fix: "run as root, or add yourself to the group that owns /dev/fuse")
        }
        if geteuid() != 0 && !FileManager.default.isExecutableFile(atPath: "/usr/bin/fusermount3") && !FileManager.default.isExecutableFile(atPath: "/bin/fusermount3") {
            throw MountProblem("fuse3 is not installed (no fusermount3)", fix: "install it: sudo apt-get install -y fuse3")
        }
    }

    public static func checkCacheDirectory(_ path: String) throws(MountProblem) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw MountProblem("cannot create the cache folder \(path): \(error.localizedDescription)", fix: "choose another with --cache-dir")
        }
        guard access(path, W_OK) == 0 else {
            throw MountProblem("the cache folder \(path) is not writable", fix: "fix its permissions, or choose another with --cache-dir")
        }
    }

    /// Whether something is mounted at `path`.
    /// The ids (mountinfo's first field) of the StowFS mounts at `path` (type `fuse.stowfs`).
    public static func stowfsMounts(at path: String) -> Set<String> {
        let canonical = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL.path
        guard let text = ProcFiles.mountinfo else { return [] }
        var out = Set<String>()
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count > 4, MountPaths.unescape(String(f[4])) == canonical, let dash = f.firstIndex(of: "-"), dash + 1 < f.count,
                f[dash + 1] == "fuse.stowfs"
            else { continue }
            out.insert(String(f[0]))
        }
        return out
    }

    public static func isMounted(_ path: String) -> Bool {
        let canonical = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL.path
        guard let text = ProcFiles.mountinfo else { return false }
        return text.split(separator: "\n").contains { line in
            let f = line.split(separator: " ")
            return f.count > 4 && MountPaths.unescape(String(f[4])) == canonical
        }
    }

    /// Connects to the server and finds the namespace; creates it when asked to.
    public static func checkServer(_ store: any ObjectStore, endpoint: String, namespace: Namespace?, create: Bool) async throws(MountProblem) {
        let names: [String]
        do {
            names = try await store.namespaces().map(\.name)
        } catch let e as StorageError {
            switch e.kind {
            case .unauthorized:
                throw MountProblem("the server at \(endpoint) rejected the token", fix: "check STOWFS_TOKEN or --token-file")
            case .forbidden:
                throw MountProblem("the token may not list namespaces on \(endpoint)", fix: "use a token with read access")
            case .tlsFailure:
                throw MountProblem(
                    "cannot connect to the server at \(endpoint) securely: \(e.message)",
                    fix: "if the server's certificate comes from a private CA, give that CA's certificate with --ca-file FILE "
                        + "(or ca_file in the config file)")
            default:
                let why = e.message.replacingOccurrences(of: "cannot reach \(endpoint): ", with: "")
                throw MountProblem(
                    "cannot reach the server at \(endpoint): \(why)", fix: "is stowd running there? check --endpoint (or endpoint in the config file)",
                    // Not answering (no connection, a timeout, a proxy with no server behind it) —
                    // not a server that answers with an error of its own.
                    unreachable: (e.kind == .unavailable || e.kind == .cancelled) && (e.status.map { [502, 503, 504].contains($0) } ?? true))
            }
        } catch {
            throw MountProblem("cannot reach the server at \(endpoint): \(error)", fix: "is stowd running there? check --endpoint", unreachable: true)
        }
        guard let namespace, !names.contains(namespace.name) else { return }
        guard create else {
            throw MountProblem(
                "the namespace `\(namespace)` does not exist on \(endpoint)" + (names.isEmpty ? "" : " (it has: \(names.joined(separator: ", ")))"),
                fix: "create it by mounting with --create, or pick one of the existing ones")
        }
        do {
            _ = try await store.createNamespace(namespace)
        } catch {
            throw MountProblem("cannot create the namespace `\(namespace)`: \(error)", fix: "use a token with admin permission on it")
        }
    }
}
