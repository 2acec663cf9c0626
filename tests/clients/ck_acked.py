#!/usr/bin/env python3
"""Produce continuously with confluent-kafka and print every acknowledgement.

Produces record i = 0, 1, 2, ... (key 'k{i % 16}' with --keyed, value
'{value-prefix}-{i}', padded with '.' to --value-size) to --topic with --acks (default all), at most
--rate records per second (0 = as fast as the queue allows), until it is
killed, --duration seconds have passed, --max records were produced, or a
delivery fails (after which it stops producing and only waits up to --drain
seconds for the reports still outstanding). Each acknowledged record is
printed, and stdout flushed, as soon as its delivery report arrives:

  ACKED <partition> <offset> <value>

(offset -1 when librdkafka acknowledged the record without one: an
idempotent batch whose answer was lost, implicitly acked once a later
batch of its partition succeeded).

A failed delivery is printed as 'FAILED <error name> <value>'. At the end
(not when killed) one JSON line:

  {"produced": n, "acked": n, "failed": n, "undelivered": n,
   "errors": ["..."], "stopped_by": "duration"|"max"|"error"|"signal",
   "elapsed_s": s, "librdkafka": "2.16.0"}

Exit 0 when it stopped by --duration or --max with every record acked,
1 otherwise (JSON still printed).
"""

import argparse
import signal
import sys
import time

from _common import emit, parse_kv, run, value_for

import confluent_kafka
from confluent_kafka import Producer


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    ap.add_argument("--keyed", action="store_true", help="key = k{i %% 16}")
    ap.add_argument("--value-prefix", default="acked")
    ap.add_argument("--value-size", type=int, default=0, help="pad values with '.' to this many bytes")
    ap.add_argument("--rate", type=float, default=0.0, help="records per second (0 = unthrottled)")
    ap.add_argument("--duration", type=float, default=60.0, help="stop producing after this many seconds")
    ap.add_argument("--max", type=int, default=0, help="stop after this many records (0 = no limit)")
    ap.add_argument("--max-in-flight", type=int, default=2000,
                    help="produced but not yet reported records at most (keeps the queue short)")
    ap.add_argument("--message-timeout", type=float, default=5.0,
                    help="librdkafka message.timeout.ms, in seconds: how soon a delivery fails while the broker is gone")
    ap.add_argument("--drain", type=float, default=15.0, help="seconds to wait for outstanding reports at the end")
    ap.add_argument("--linger-ms", type=int, default=2)
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property (repeatable)")
    a = ap.parse_args()

    conf = {
        "bootstrap.servers": a.bootstrap,
        "client.id": "ck_acked",
        "acks": a.acks,
        "linger.ms": a.linger_ms,
        "message.timeout.ms": int(a.message_timeout * 1000),
        "reconnect.backoff.max.ms": 500,
    }
    state = {"acked": 0, "failed": 0, "errors": [], "stop": None}
    out = sys.stdout

    def on_error(err):
        # Without an error_cb a fatal error (an idempotent producer's
        # sequence desynchronisation) only surfaces as an obscure exception
        # from poll(); here it is printed and stops producing.
        line = "%s: %s" % (err.name(), err.str())
        print("ERROR%s %s" % (" (fatal)" if err.fatal() else "", line), file=sys.stderr, flush=True)
        if err.fatal():
            if len(state["errors"]) < 20:
                state["errors"].append("fatal " + line)
            if state["stop"] is None:
                state["stop"] = "error"

    conf["error_cb"] = on_error
    conf.update(parse_kv(a.extra))
    p = Producer(conf)

    def on_delivery(err, msg):
        value = msg.value().decode()
        if err is not None:
            state["failed"] += 1
            if len(state["errors"]) < 20:
                state["errors"].append("%s: %s" % (err.name(), err.str()))
            out.write("FAILED %s %s\n" % (err.name(), value))
            if state["stop"] is None:
                state["stop"] = "error"
        else:
            state["acked"] += 1
            # librdkafka acknowledges an idempotent batch whose answer was
            # lost once a later one succeeds ("implicitly acked"), without
            # an offset: None here, -1 on the line.
            offset = msg.offset()
            out.write("ACKED %d %d %s\n" % (msg.partition(), -1 if offset is None else offset, value))
        out.flush()

    def on_signal(_signum, _frame):
        if state["stop"] is None:
            state["stop"] = "signal"

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    produced = 0
    started = time.monotonic()
    while state["stop"] is None:
        now = time.monotonic()
        if now - started >= a.duration:
            state["stop"] = "duration"
            break
        if a.max and produced >= a.max:
            state["stop"] = "max"
            break
        if a.rate > 0 and produced >= (now - started) * a.rate:
            p.poll(0.001)
            continue
        if produced - state["acked"] - state["failed"] >= a.max_in_flight:
            p.poll(0.01)
            continue
        kw = {"value": value_for(a.value_prefix, produced, a.value_size), "on_delivery": on_delivery}
        if a.keyed:
            kw["key"] = "k%d" % (produced % 16)
        try:
            p.produce(a.topic, **kw)
        except BufferError:
            p.poll(0.01)
            continue
        produced += 1
        p.poll(0)

    deadline = time.monotonic() + a.drain
    while len(p) > 0 and time.monotonic() < deadline:
        p.flush(0.5)
    undelivered = len(p)
    result = {
        "produced": produced,
        "acked": state["acked"],
        "failed": state["failed"],
        "undelivered": undelivered,
        "errors": sorted(set(state["errors"])),
        "stopped_by": state["stop"],
        "elapsed_s": round(time.monotonic() - t0, 3),
        "librdkafka": confluent_kafka.libversion()[0],
    }
    ok = state["stop"] in ("duration", "max") and state["acked"] == produced
    emit(result, ok)


if __name__ == "__main__":
    run(main)
