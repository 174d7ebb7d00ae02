#!/usr/bin/env python3
"""Generates crates/capstan-apiserver/src/protobuf/messages.rs: the field numbers, JSON names and
types of the Kubernetes protobuf messages capstan serves, read from the FileDescriptorProtos that
the `k8s-rs-pb` crate embeds (Kubernetes' generated.proto files, compiled).

Usage: scripts/gen-protobuf-tables.py [K8S_RS_PB_SRC_VERSION_DIR]
  default: ~/.cargo/registry/src/*/k8s-rs-pb-0.5.0/src/v1_33 (fetch it with
  `cargo fetch` after adding k8s-rs-pb as a dependency, or `cargo download`).
"""
import glob
import os
import re
import sys

PACKAGES = [
    "api/core/v1", "api/apps/v1", "api/policy/v1", "api/rbac/v1", "api/certificates/v1",
    "api/coordination/v1", "api/discovery/v1", "api/events/v1", "api/authentication/v1",
    "api/authorization/v1", "api/autoscaling/v1", "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime", "apimachinery/pkg/util/intstr", "apimachinery/pkg/api/resource",
]


def rust_bytes(text):
    """The value of a Rust byte-string literal body."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = text[i + 1]
        if n == "\n":
            i += 2
            while i < len(text) and text[i] in " \t\n\r":
                i += 1
            continue
        simple = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, '"': 34, "'": 39}
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            raise ValueError("escape " + n)
    return bytes(out)


def descriptor_bytes(path):
    src = open(path).read()
    m = re.search(r'static file_descriptor_proto_data: &\'static \[u8\] = b"(.*?)";\n', src, re.S)
    return rust_bytes(m.group(1))


def varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def fields(b):
    i = 0
    while i < len(b):
        tag, i = varint(b, i)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            v = b[i:i + n]
            i += n
        elif wire == 1:
            v = b[i:i + 8]
            i += 8
        elif wire == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError("wire %d" % wire)
        yield num, v


def message(b, prefix, out):
    name = None
    fs = []
    nested = []
    map_entry = False
    for num, v in fields(b):
        if num == 1:
            name = v.decode()
        elif num == 2:
            f = {}
            for n2, v2 in fields(v):
                if n2 == 1:
                    f["name"] = v2.decode()
                elif n2 == 3:
                    f["number"] = v2
                elif n2 == 4:
                    f["label"] = v2
                elif n2 == 5:
                    f["type"] = v2
                elif n2 == 6:
                    f["type_name"] = v2.decode().lstrip(".")
                elif n2 == 10:
                    f["json"] = v2.decode()
            fs.append(f)
        elif num == 3:
            nested.append(v)
        elif num == 7:
            for n2, v2 in fields(v):
                if n2 == 7 and v2:
                    map_entry = True
    full = prefix + "." + name
    out[full] = {"fields": fs, "map_entry": map_entry}
    for n in nested:
        message(n, full, out)


def load(root):
    out = {}
    for pkg in PACKAGES:
        path = os.path.join(root, pkg, "mod.rs")
        package = None
        for num, v in fields(descriptor_bytes(path)):
            if num == 2:
                package = v.decode()
        for num, v in fields(descriptor_bytes(path)):
            if num == 4:
                message(v, package, out)
    return out


# Fields Go embeds (`json:",inline"`): their message's fields appear in the parent's JSON.
INLINE = {
    ("api.core.v1.Probe", "handler"),
    ("api.core.v1.Volume", "volumeSource"),
    ("api.core.v1.EphemeralContainer", "ephemeralContainerCommon"),
    ("api.core.v1.PersistentVolumeSpec", "persistentVolumeSource"),
}


def type_of(f, msgs):
    t = f["type"]
    if t == 11:
        name = f["type_name"]
        target = msgs.get(name)
        if target and target["map_entry"]:
            value = [x for x in target["fields"] if x["number"] == 2][0]
            if value["type"] == 9:
                return "MapStr"
            if value["type"] == 12:
                return "MapBytes"
            return 'MapMsg("%s")' % value["type_name"]
        return 'Msg("%s")' % name
    return {9: "Str", 12: "Bytes", 3: "I64", 4: "I64", 5: "I32", 13: "I32", 14: "I32", 8: "Bool",
            1: "F64", 2: "F64", 17: "I32", 18: "I64"}[t]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else glob.glob(os.path.expanduser(
        "~/.cargo/registry/src/*/k8s-rs-pb-0.5.0/src/v1_33"))[0]
    msgs = load(root)
    lines = [
        "//! Generated by scripts/gen-protobuf-tables.py from Kubernetes' generated.proto files",
        "//! (as compiled into the descriptors `k8s-rs-pb` embeds): every message of the API groups",
        "//! capstan serves, by full name, with each field's number, JSON name (empty for a message Go\n//! embeds inline), type and repetition.",
        "//! Do not edit; regenerate.",
        "",
        "use super::Field;",
        "use super::Type::*;",
        "",
        "/// (message, [(number, JSON name, type, repeated)]), sorted by message name.",
        "#[rustfmt::skip]",
        "pub(super) const MESSAGES: &[(&str, &[Field])] = &[",
    ]
    for name in sorted(msgs):
        m = msgs[name]
        if m["map_entry"]:
            continue
        parts = []
        for f in sorted(m["fields"], key=lambda f: f["number"]):
            t = type_of(f, msgs)
            repeated = f.get("label") == 3 and not t.startswith("Map")
            json_name = "" if (name, f["name"]) in INLINE else (f.get("json") or f["name"])
            parts.append('(%d, "%s", %s, %s)' % (f["number"], json_name, t,
                                                 "true" if repeated else "false"))
        lines.append('    ("%s", &[%s]),' % (name, ", ".join(parts)))
    lines.append("];")
    sys.stdout.write("\n".join(lines) + "\n")


main()
