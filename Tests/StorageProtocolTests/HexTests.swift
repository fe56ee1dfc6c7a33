import Foundation
import StorageProtocol
import Testing

@Test("hex by hand: every byte as Foundation's %02x and %02X write it; random ids of the length asked, all hex")
func hexAgreesWithFormat() {
    let all = (0...255).map { UInt8($0) }
    #expect(Hex.lowercase(all) == all.map { String(format: "%02x", $0) }.joined())
    #expect(Hex.uppercase(all) == all.map { String(format: "%02X", $0) }.joined())
    #expect(Hex.lowercase([UInt8]()) == "")
    let a = Hex.random(bytes: 16), b = Hex.random(bytes: 16)
    #expect(a.count == 32 && b.count == 32 && a != b)
    for n in [0, 1, 7, 8, 9, 24] { #expect(Hex.random(bytes: n).count == 2 * n) }
    #expect(a.utf8.allSatisfy { ("0"..."9").contains(Character(Unicode.Scalar($0))) || ("a"..."f").contains(Character(Unicode.Scalar($0))) })
}
