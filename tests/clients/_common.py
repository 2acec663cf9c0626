"""Helpers shared by the client scripts (imported, never run).

Every script prints exactly one JSON object as the LAST line of stdout and
exits 0 when it did what was asked, 1 when it ran but the result falls short
(records undelivered, fewer records consumed than expected; the JSON line is
still printed), 2 on bad arguments and 3 on a crash (traceback on stderr).
"""

import hashlib
import json
import sys
import time
import traceback


def value_for(prefix, i, size):
    """The value of record i: '{prefix}-{i}', padded with '.' to size bytes."""
    v = "%s-%d" % (prefix, i)
    if size and len(v) < size:
        v = v + "." * (size - len(v))
    return v


def values_sha(values):
    """sha256 over the sorted, de-duplicated values joined by newlines."""
    h = hashlib.sha256()
    h.update("\n".join(sorted(set(values))).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def parse_kv(items):
    """['a=b', 'c=d'] -> {'a': 'b', 'c': 'd'} (for -X client options)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit("bad -X option %r: expected key=value" % item)
        k, v = item.split("=", 1)
        out[k] = v
    return out


def decode(b):
    if b is None:
        return None
    if isinstance(b, str):
        return b
    return b.decode("utf-8", "surrogateescape")


def emit(result, ok=True, message=None):
    """Print the result as the last stdout line and exit (0 if ok, else 1)."""
    if message:
        print(message, file=sys.stderr)
    sys.stdout.flush()
    print(json.dumps(result, sort_keys=True, default=str))
    sys.stdout.flush()
    sys.exit(0 if ok else 1)


def run(main):
    """Run main(); a crash becomes exit 3 with the traceback on stderr."""
    t0 = time.monotonic()
    try:
        main(t0)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - report anything
        traceback.print_exc()
        sys.exit(3)


class OrderCheck:
    """Checks that a consumer sees each partition's offsets strictly rising.

    A partition that is (re)assigned may start over from its committed
    offset, so assign() resets its expectation.
    """

    def __init__(self):
        self.last = {}
        self.in_order = True
        self.violations = []

    def assign(self, partitions):
        for p in partitions:
            self.last.pop(p, None)

    def see(self, partition, offset):
        last = self.last.get(partition)
        if last is not None and offset <= last:
            self.in_order = False
            if len(self.violations) < 10:
                self.violations.append([partition, last, offset])
        self.last[partition] = offset


def top_errors(errors):
    """The distinct errors, sorted, at most 20 (for the JSON)."""
    return sorted(set(errors))[:20]


def add_offset(offsets, partition, offset):
    """Widens offsets[str(partition)] = [min, max] to take offset."""
    lo, hi = offsets.get(str(partition), [offset, offset])
    offsets[str(partition)] = [min(lo, offset), max(hi, offset)]


def produced(t0, count, delivered, errors, **extra):
    """The produce JSON from deliveries [(partition, offset, value)]: the
    offset is None (or < 0) when the broker named none (acks=0), the
    partition None when unknown. `extra` adds client-specific keys."""
    partitions, offsets = {}, {}
    for part, off, _ in delivered:
        if part is None:
            continue
        partitions[str(part)] = partitions.get(str(part), 0) + 1
        if off is not None and off >= 0:
            add_offset(offsets, part, off)
    result = {
        "delivered": len(delivered),
        "count": count,
        "errors": top_errors(errors),
        "error_count": len(errors),
        "partitions": partitions,
        "offsets": offsets,
        "values_sha": values_sha(v for _, _, v in delivered),
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    result.update(extra)
    return result


def consumed(t0, a, seen, received, by_member, order, committed, errors):
    """The consume JSON from seen {(partition, offset): (key, value)}, with
    "records_list" when a.records."""
    partitions, offsets = {}, {}
    for part, off in seen:
        partitions[str(part)] = partitions.get(str(part), 0) + 1
        add_offset(offsets, part, off)
    result = {
        "records": len(seen),
        "received": received,
        "duplicates": received - len(seen),
        "expect": a.expect,
        "by_member": by_member,
        "partitions": partitions,
        "offsets": offsets,
        "per_partition_in_order": order.in_order,
        "order_violations": order.violations[:10],
        "values_sha": values_sha(v for _, v in seen.values()),
        "committed": committed,
        "errors": top_errors(errors),
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    if a.records:
        result["records_list"] = [[p, o, k, v] for (p, o), (k, v) in sorted(seen.items())]
    return result


def parse_kp_options(items):
    """-X key=value for kafka-python: ints, true/false and 'a.b.c' versions typed."""
    out = {}
    for k, v in parse_kv(items).items():
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        elif k == "api_version":
            out[k] = tuple(int(x) for x in v.split("."))
        else:
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
    return out
