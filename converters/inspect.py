"""l3convert inspect: what a converted dataset holds, and whether its shards are intact."""

from __future__ import annotations

import collections
import hashlib

import numpy as np

from l3codec import dataset, fields
from l3codec.format import L3Error

CHUNK = 1 << 22


def _shard_digest(reader, name: str) -> tuple:
    """(bytes, sha256) of a shard, streamed."""
    digest, size = hashlib.sha256(), 0
    with reader.open_file(reader.split, name) as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def inspect(root, /, *, deep: bool = False, storage_options=None) -> dict:
    """A report: per split counts (per class), sizes, ratio, shapes, failures, checksum and decode checks."""
    manifest = dataset.read_manifest(root, storage_options=storage_options)
    report = {"root": str(root), "layout": manifest.get("source", {}).get("layout"),
              "source": manifest.get("source", {}).get("path"), "options": manifest.get("options", {}),
              "codec_format_version": manifest.get("codec_format_version"), "splits": {}, "problems": []}
    class_names = manifest.get("class_names", [])
    for split, facts in manifest.get("splits", {}).items():
        reader = dataset.open_dataset(root, split, storage_options=storage_options)
        index = reader.index
        shard_bytes = 0
        sizes = {}
        for shard in facts.get("shards", []):
            try:
                size, sha = _shard_digest(reader, shard["name"])
            except OSError as error:
                report["problems"].append(f"{split}/{shard['name']}: unreadable ({error})")
                continue
            shard_bytes += size
            sizes[shard["name"]] = size
            if size != shard["bytes"] or sha != shard["sha256"]:
                report["problems"].append(f"{split}/{shard['name']}: checksum mismatch "
                                          f"({size} bytes, manifest says {shard['bytes']})")
        for field in reader.members:
            ends = index[f"{field}_offset"].astype(np.int64) + index[f"{field}_size"].astype(np.int64)
            for number in np.unique(index["shard"]):
                limit = sizes.get(dataset.shard_name(int(number)))
                if limit is not None and ends[index["shard"] == number].max(initial=0) > limit:
                    report["problems"].append(f"{split}/{dataset.shard_name(int(number))}: index points past its end")
        labels = index["label"]
        # counted per label present, not by bincount: one label of 2**31 - 1 would allocate 16 GiB
        present, counts = np.unique(np.asarray(labels[labels >= 0], np.int64), return_counts=True)
        per_class = {(class_names[i] if i < len(class_names) else str(i)): int(count)
                     for i, count in zip(present.tolist(), counts.tolist())}
        beyond = present[present >= len(class_names)] if class_names else present[:0]
        if beyond.size:
            report["problems"].append(f"{split}: {beyond.size} label{'s' if beyond.size > 1 else ''} beyond the "
                                      f"{len(class_names)} class names (largest {int(beyond[-1])})")
        shapes = collections.Counter(zip(index["image_height"].tolist(), index["image_width"].tolist(),
                                         index["image_channels"].tolist(), index["image_bits"].tolist()))
        member_bytes = int(sum(index[f"{field}_size"].astype(np.int64).sum() for field in reader.fields))
        decoded = 0
        if deep:
            import l3codec

            for i in range(len(reader)):
                for field in reader.fields:
                    try:
                        data = reader.read(i, field)
                        header = l3codec.info(data)
                        if (header.height, header.width, header.channels) != reader.shape(i, field):
                            raise L3Error(f"the index says {reader.shape(i, field)}, the file holds "
                                          f"{(header.height, header.width, header.channels)}")
                        l3codec.decode(data)
                        decoded += 1
                    except (L3Error, OSError) as error:
                        report["problems"].append(f"{split}/{reader.key(i)}.{fields.member_suffix(field)}: {error}")
        source_bytes = facts.get("source_bytes", 0)
        report["splits"][split] = {
            "samples": len(reader), "fields": list(reader.fields), "shards": len(facts.get("shards", [])),
            "per_class": per_class, "failures": facts.get("failures", 0),
            "source_bytes": source_bytes, "l3_bytes": member_bytes, "shard_bytes": shard_bytes,
            "ratio": member_bytes / source_bytes if source_bytes else None,
            "container_overhead": (shard_bytes - member_bytes) / member_bytes if member_bytes else None,
            "shapes": [{"height": h, "width": w, "channels": c, "bits": b, "count": n}
                       for (h, w, c, b), n in shapes.most_common(5)],  # the commonest; distinct_shapes counts all
            "distinct_shapes": len(shapes),
            "decoded": decoded if deep else None,
        }
    report["failures"] = manifest.get("failures", [])
    report["ok"] = not report["problems"]
    return report


def report_text(report: dict) -> str:
    lines = [f"{report['root']}: {report['layout']} from {report['source']}, "
             f"L3 format {report['codec_format_version']}, images {report['options'].get('mode')}"]
    if report["options"].get("lossy_resize"):
        lines.append(f"  LOSSY resize: max_side={report['options'].get('max_side')} "
                     f"resize_short={report['options'].get('resize_short')}")
    for split, facts in report["splits"].items():
        ratio = f"{facts['ratio']:.3f}" if facts["ratio"] is not None else "n/a"
        overhead = f"{facts['container_overhead'] * 100:.2f}%" if facts["container_overhead"] is not None else "n/a"
        lines.append(f"{split}: {facts['samples']} samples ({', '.join(facts['fields'])}), {facts['shards']} shards, "
                     f"{facts['failures']} failure{'' if facts['failures'] == 1 else 's'}; "
                     f"source {facts['source_bytes'] / 1e6:.2f} MB, "
                     f"L3 {facts['l3_bytes'] / 1e6:.2f} MB (ratio {ratio}), shards {facts['shard_bytes'] / 1e6:.2f} MB "
                     f"(container overhead {overhead})")
        if facts["per_class"]:
            shown = list(facts["per_class"].items())[:10]
            more = f", ... ({len(facts['per_class'])} classes)" if len(facts["per_class"]) > 10 else ""
            lines.append("  per class: " + ", ".join(f"{name} {count}" for name, count in shown) + more)
        lines.append("  shapes: " + ", ".join(f"{s['height']}x{s['width']}x{s['channels']} {s['bits']}-bit "
                                             f"({s['count']})" for s in facts["shapes"])
                     + (f", ... ({facts['distinct_shapes']} distinct shapes)"
                        if facts["distinct_shapes"] > len(facts["shapes"]) else ""))
        if facts["decoded"] is not None:
            lines.append(f"  decoded {facts['decoded']} images")
    for failure in report["failures"][:10]:
        lines.append(f"  failed source {failure['split']}/{failure['key']}: {failure['error']}")
    if len(report["failures"]) > 10:
        lines.append(f"  ... and {len(report['failures']) - 10} more failed sources (manifest.json lists them all)")
    lines += [f"PROBLEM {problem}" for problem in report["problems"]]
    lines.append("all shard checksums match" + (" and every image decodes" if any(
        facts["decoded"] is not None for facts in report["splits"].values()) else "") if report["ok"]
                 else f"{len(report['problems'])} problems")
    return "\n".join(lines)
