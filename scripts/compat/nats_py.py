"""JetStream, KV and object store through nats.py against a running server.

Usage: python nats_py.py nats://127.0.0.1:4222
Exits non-zero on the first behaviour that differs from nats-server's.
"""

import asyncio
import sys

import nats
from nats.js.api import ConsumerConfig, StreamConfig, RetentionPolicy
from nats.js.errors import BadRequestError, KeyWrongLastSequenceError, NotFoundError


async def main(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()

    # Streams.
    await js.add_stream(StreamConfig(name="PY", subjects=["py.>"]))
    for i in range(10):
        ack = await js.publish(f"py.{i}", f"m{i}".encode(), headers={"Nats-Msg-Id": f"id{i}"})
        assert ack.seq == i + 1, ack
    dup = await js.publish("py.0", b"again", headers={"Nats-Msg-Id": "id0"})
    assert dup.duplicate and dup.seq == 1, dup
    info = await js.stream_info("PY")
    assert info.state.messages == 10, info.state
    msg = await js.get_msg("PY", seq=3)
    assert msg.data == b"m2", msg
    last = await js.get_last_msg("PY", "py.9")
    assert last.seq == 10
    try:
        await js.add_stream(StreamConfig(name="PY2", subjects=["py.1"]))
        raise AssertionError("overlap accepted")
    except BadRequestError as e:
        assert e.err_code == 10065, e
    try:
        await js.stream_info("NOPE")
        raise AssertionError("missing stream found")
    except NotFoundError as e:
        assert e.err_code == 10059, e
    names = await js.streams_info()
    assert [s.config.name for s in names] == ["PY"]

    # Pull consumer with acks.
    sub = await js.pull_subscribe("py.>", durable="worker")
    got = []
    while len(got) < 10:
        for m in await sub.fetch(5, timeout=2):
            got.append(m.data)
            await m.ack_sync()
    assert got[0] == b"m0" and len(got) == 10
    ci = await js.consumer_info("PY", "worker")
    assert ci.num_ack_pending == 0 and ci.delivered.stream_seq == 10, ci

    # Push consumer.
    seen = asyncio.Queue()

    async def cb(m):
        await seen.put(m.data)
        await m.ack()

    psub = await js.subscribe("py.5", cb=cb, config=ConsumerConfig(deliver_policy="all"))
    assert await asyncio.wait_for(seen.get(), 5) == b"m5"
    await psub.unsubscribe()

    # Work queue.
    await js.add_stream(StreamConfig(name="JOBS", subjects=["jobs.>"], retention=RetentionPolicy.WORK_QUEUE))
    await js.publish("jobs.a", b"job")
    wsub = await js.pull_subscribe("jobs.>", durable="w")
    (m,) = await wsub.fetch(1, timeout=2)
    await m.ack_sync()
    jinfo = await js.stream_info("JOBS")
    assert jinfo.state.messages == 0, jinfo.state

    # KV.
    kv = await js.create_key_value(bucket="pykv", history=5)
    r1 = await kv.put("k", b"v1")
    await kv.put("k", b"v2")
    e = await kv.get("k")
    assert e.value == b"v2" and e.revision == r1 + 1
    try:
        await kv.update("k", b"stale", last=r1)
        raise AssertionError("stale update accepted")
    except KeyWrongLastSequenceError:
        pass
    await kv.delete("k")
    hist = await kv.history("k")
    assert len(hist) == 3, hist
    keys_watch = await kv.watchall()
    await kv.put("other", b"x")
    async for entry in keys_watch:
        if entry is not None and entry.key == "other":
            break
    await keys_watch.stop()

    # Object store.
    obs = await js.create_object_store("pyobj")
    data = bytes(range(256)) * 8000
    await obs.put("blob", data)
    res = await obs.get("blob")
    assert res.data == data
    await obs.delete("blob")

    await js.delete_stream("PY")
    await nc.close()
    print("nats.py: all checks passed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "nats://127.0.0.1:4222"))
