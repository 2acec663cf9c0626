#!/usr/bin/env python3
"""Produce N records with confluent-kafka (librdkafka) and report deliveries.

Record i (i = start .. start+count-1) has key 'k{i % 16}' when --keyed (no key
otherwise), headers i={i}, src=ck and a null 'empty' with --headers, and value '{compression}-{i}' (or '{value-prefix}-{i}'), padded
with '.' to --value-size bytes. Waits for every delivery report, then prints:

  {"delivered": n, "count": N, "errors": ["..."], "error_count": e,
   "partitions": {"p": count}, "offsets": {"p": [min, max]},
   "values_sha": "<sha256 of sorted delivered values>", "elapsed_s": s,
   "client": "confluent-kafka 2.16.1", "librdkafka": "2.16.0"}

Exit 1 (JSON still printed) when fewer than N were delivered.
"""

import argparse
import time

from _common import emit, parse_kv, produced, run, value_for

import confluent_kafka
from confluent_kafka import Producer


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--start", type=int, default=0, help="index of the first record (default 0)")
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    ap.add_argument("--idempotent", action="store_true")
    ap.add_argument("--keyed", action="store_true", help="key = k{i %% 16}")
    ap.add_argument("--headers", action="store_true", help="headers i={i} and src=ck (a null-valued one too)")
    ap.add_argument("--partition", type=int, default=None, help="produce to this partition only")
    ap.add_argument("--value-size", type=int, default=0, help="pad values with '.' to this many bytes")
    ap.add_argument("--value-prefix", default=None, help="value prefix (default: the compression name)")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for deliveries")
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property (repeatable)")
    a = ap.parse_args()

    conf = {
        "bootstrap.servers": a.bootstrap,
        "client.id": "ck_produce",
        "compression.type": a.compression,
        "acks": a.acks,
        "linger.ms": a.linger_ms,
        "enable.idempotence": a.idempotent,
        "message.timeout.ms": int(a.timeout * 1000),
    }
    conf.update(parse_kv(a.extra))
    p = Producer(conf)

    prefix = a.value_prefix if a.value_prefix is not None else a.compression
    delivered = []  # (partition, offset, value)
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append("%s: %s" % (err.name(), err.str()))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value().decode()))

    for i in range(a.start, a.start + a.count):
        kw = {"value": value_for(prefix, i, a.value_size), "on_delivery": on_delivery}
        if a.keyed:
            kw["key"] = "k%d" % (i % 16)
        if a.headers:
            kw["headers"] = [("i", str(i)), ("src", "ck"), ("empty", None)]
        if a.partition is not None:
            kw["partition"] = a.partition
        while True:
            try:
                p.produce(a.topic, **kw)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)

    deadline = time.monotonic() + a.timeout + 5
    while len(p) > 0 and time.monotonic() < deadline:
        p.flush(1.0)
    undelivered = len(p)

    result = produced(t0, a.count, delivered, errors, undelivered=undelivered,
                      client="confluent-kafka %s" % confluent_kafka.__version__,
                      librdkafka=confluent_kafka.libversion()[0])
    ok = len(delivered) == a.count
    emit(result, ok, None if ok else "ck_produce: delivered %d of %d (%s)" % (len(delivered), a.count, result["errors"][:3]))


if __name__ == "__main__":
    run(main)
