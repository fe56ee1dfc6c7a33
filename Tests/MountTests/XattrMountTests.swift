import Foundation
import Testing

@Suite("mount: extended attributes", .serialized)
struct XattrMountTests {
    @Test("setfattr user.tags and metadata; getfattr reads them back; the server has them; a remount too")
    func tags() async throws {
        try await withMount { m in
            let f = m.mountpoint + "/photo.jpg"
            try m.sh("echo img > \(f) && setfattr -n user.tags -v 'summer,beach' \(f) && setfattr -n user.camera -v fuji \(f)")
            #expect(try m.sh("getfattr --absolute-names --only-values -n user.tags \(f)") == "summer,beach")
            #expect(try m.sh("getfattr --absolute-names --only-values -n user.stow.content-type \(f)") == "image/jpeg")
            let dump = try m.sh("getfattr --absolute-names -d \(f)")
            #expect(dump.contains("user.camera=\"fuji\"") && dump.contains("user.tags=\"summer,beach\""))
            try m.stowfs(["sync", m.mountpoint])
            let record = try await m.withClient { c in try await c.record(m.namespace, try .init("photo.jpg")) }
            #expect(record.tags == ["summer", "beach"])
            #expect(record.metadata == ["camera": "fuji"])
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("getfattr --absolute-names --only-values -n user.tags \(f)") == "summer,beach")
            try m.sh("setfattr -x user.camera \(f)")
            #expect(try m.sh("getfattr --absolute-names -n user.camera \(f) 2>&1 || true").contains("No such attribute"))
        }
    }

    @Test("user.stow.url is a working link; user.stow.status says stored; read-only names refuse writes")
    func readOnly() async throws {
        try await withMount { m in
            let f = m.mountpoint + "/share.txt"
            try m.sh("echo 'shared bytes' > \(f)")
            let url = try m.sh("getfattr --absolute-names --only-values -n user.stow.url \(f)")
            #expect(url.hasPrefix("http://"))
            #expect(try m.sh("curl -sf '\(url)'") == "shared bytes")
            #expect(try m.sh("getfattr --absolute-names --only-values -n user.stow.status \(f)") == "stored")
            #expect(try m.sh("setfattr -n user.stow.id -v x \(f) 2>&1 || true").contains("not permitted"))
            try m.sh("setfattr -n user.stow.public -v true \(f)")
            let publicURL = try m.sh("getfattr --absolute-names --only-values -n user.stow.url \(f)")
            #expect(!publicURL.contains("signature="))
            #expect(try m.sh("curl -sf '\(publicURL)'") == "shared bytes")
        }
    }
}
