"""Parsers for the output of the tools the harness runs: fio's JSON, `zfs get -Hp`, `compsize -b`
and `presso status --json`. Each takes the text and returns plain numbers (bytes, seconds)."""
import json
import re


def _json_object(text):
    """The JSON object in TEXT; fio may print notes ('fio: ...') before it."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in the output")
    return json.loads(text[start:])


def parse_fio(text):
    """fio --output-format=json with group_reporting: the summed read and write figures.
    Returns {"read_bytes", "write_bytes", "read_bw", "write_bw" (bytes/s), "runtime_s",
    "bytes", "bw" (read+write bytes/s), "iops", "errors"}."""
    d = _json_object(text)
    jobs = d.get("jobs") or []
    if not jobs:
        raise ValueError("fio output has no jobs")
    out = {"read_bytes": 0, "write_bytes": 0, "read_bw": 0.0, "write_bw": 0.0, "iops": 0.0,
           "runtime_s": 0.0, "errors": 0}
    for j in jobs:
        out["errors"] += int(j.get("error", 0))
        for kind in ("read", "write"):
            s = j.get(kind) or {}
            out[f"{kind}_bytes"] += int(s.get("io_bytes", 0))
            out[f"{kind}_bw"] += float(s.get("bw_bytes", 0))
            out["iops"] += float(s.get("iops", 0))
            out["runtime_s"] = max(out["runtime_s"], float(s.get("runtime", 0)) / 1000.0)
    out["bytes"] = out["read_bytes"] + out["write_bytes"]
    out["bw"] = out["read_bw"] + out["write_bw"]
    return out


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def parse_size(s):
    """'123', '1.5K', '2M', '4.00G' → bytes (powers of 1024, as zfs and compsize print them)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)i?B?\s*", s, re.I)
    if not m:
        raise ValueError(f"not a size: {s!r}")
    return int(round(float(m.group(1)) * _SUFFIX[m.group(2).upper()]))


def parse_zfs_get(text):
    """`zfs get -Hp PROPS DATASET` (tab-separated: name, property, value, source) →
    {property: value}, with compressratio as a float ('3.61x' → 3.61) and sizes as bytes."""
    props = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            parts = line.split()
            if len(parts) != 4:  # without -H: NAME PROPERTY VALUE SOURCE
                raise ValueError(f"unexpected zfs get line: {line!r}")
        _name, prop, value = parts[0], parts[1], parts[2]
        if prop in ("compressratio", "refcompressratio"):
            props[prop] = float(value.rstrip("x"))
        elif value not in ("-", "none") and re.fullmatch(r"[0-9.]+[KMGTP]?", value):
            props[prop] = parse_size(value)
        else:
            props[prop] = value
    return props


def parse_compsize(text):
    """`compsize -b PATH`: the TOTAL line → {"disk": bytes on disk, "uncompressed": bytes,
    "referenced": bytes, "ratio": uncompressed / disk}. No TOTAL line (no regular extents, e.g.
    only inline files) gives zeros and ratio None."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "TOTAL":
            # TOTAL  Perc  DiskUsage  Uncompressed  Referenced
            disk, unc, ref = (parse_size(p) for p in parts[2:5])
            return {"disk": disk, "uncompressed": unc, "referenced": ref,
                    "ratio": (unc / disk) if disk else None}
    return {"disk": 0, "uncompressed": 0, "referenced": 0, "ratio": None}


def parse_presso_status(text):
    """`presso status MOUNTPOINT --json` → {"logical_bytes", "stored_bytes", "garbage_bytes",
    "ratio", ...} (every field of the object is kept; the four are required)."""
    d = _json_object(text)
    for k in ("logical_bytes", "stored_bytes", "garbage_bytes"):
        if k not in d:
            raise ValueError(f"presso status: no {k} in {sorted(d)}")
        d[k] = int(d[k])
    if d.get("ratio") is None:
        d["ratio"] = d["logical_bytes"] / d["stored_bytes"] if d["stored_bytes"] else None
    else:
        d["ratio"] = float(d["ratio"])
    return d
