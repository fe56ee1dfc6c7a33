/// An optional value kept out of line, behind one reference: a record that carries it costs 8
/// bytes for it instead of the value's size, with the value semantics of a plain optional.
///
/// For the inode table's rarely present parts (a folder's listing state, a file's local copy):
/// every file's record carried both inline, 200 of its 512 bytes, and a folder of 100,000 files
/// kept 100,000 of them (in a hash table of 131,072 or 262,144 slots).
///
/// A mutation through `value` moves the value out of a box no one else holds, so the value's own
/// storage (a dictionary of names) stays uniquely referenced and is changed in place, not copied.
struct OutOfLine<Value>: @unchecked Sendable where Value: Sendable {
    private final class Box {
        var value: Value?
        init(_ value: Value) { self.value = value }
    }

    private var box: Box?

    init(_ value: Value?) { box = value.map(Box.init) }

    var value: Value? {
        get { box?.value }
        set { put(newValue) }
        _modify {
            var v = take()
            // Put back even when the access throws (the code after `yield` would not run).
            defer { put(v) }
            yield &v
        }
    }

    /// The value, moved out of the box when this holds the only reference to it.
    private mutating func take() -> Value? {
        guard box != nil else { return nil }
        guard isKnownUniquelyReferenced(&box) else { return box!.value }
        let v = box!.value
        box!.value = nil
        return v
    }

    private mutating func put(_ v: Value?) {
        guard let v else {
            box = nil
            return
        }
        if box != nil, isKnownUniquelyReferenced(&box) {
            box!.value = v
        } else {
            box = Box(v)
        }
    }
}
