#!/usr/bin/env python3
"""Read every record of a topic with confluent-kafka, partition by partition.

Assigns all partitions of --topic from their log start (no group, no commits,
read_committed) and reads until --expect records were seen in total and
every partition reached its end, or --timeout. Prints:

  {"count": n, "expect": N, "partitions": {"p": [[offset, key, value,
   headers, timestamp_type, timestamp], ...]}, "elapsed_s": s}

headers are [[name, value or null], ...]. Tests compare two topics' dumps
(a mirror's source and target) record by record. Exit 1 (JSON still
printed) when fewer than N records were seen in time.
"""

import argparse
import time

from _common import decode, emit, parse_kv, run

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()

    conf = {
        "bootstrap.servers": a.bootstrap,
        "group.id": "ck_dump",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "client.id": "ck_dump",
    }
    conf.update(parse_kv(a.extra))
    c = Consumer(conf)
    deadline = time.monotonic() + a.timeout
    partitions = None
    while partitions is None and time.monotonic() < deadline:
        md = c.list_topics(a.topic, timeout=5)
        t = md.topics.get(a.topic)
        if t is not None and t.error is None and t.partitions:
            partitions = sorted(t.partitions)
        else:
            time.sleep(0.2)
    if partitions is None:
        emit({"count": 0, "expect": a.expect, "partitions": {}, "error": "topic not found"}, False)
    c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in partitions])
    out = {str(p): [] for p in partitions}
    at_end = set()
    count = 0
    while time.monotonic() < deadline:
        if count >= a.expect and len(at_end) == len(partitions):
            break
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise SystemExit("consume error: %s" % msg.error())
        at_end.discard(msg.partition())
        ts_type, ts = msg.timestamp()
        headers = [[k, decode(v)] for k, v in (msg.headers() or [])]
        out[str(msg.partition())].append([msg.offset(), decode(msg.key()), decode(msg.value()), headers, ts_type, ts])
        count += 1
    c.close()
    ok = count >= a.expect
    emit({"count": count, "expect": a.expect, "partitions": out, "elapsed_s": round(time.monotonic() - t0, 3)}, ok,
         None if ok else "ck_dump: %d of %d records" % (count, a.expect))


if __name__ == "__main__":
    run(main)
