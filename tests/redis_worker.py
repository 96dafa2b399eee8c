"""A second process for the Redis tests: one command per stdin line, one JSON reply per line.

Commands (JSON lists): ``["get", ns, key]``, ``["set", ns, key, value, ttl, tags]``,
``["listen"]`` (a `RedisWakeup` callback that prints ``"woke"`` on every notify).
Started as ``python redis_worker.py URL PREFIX LOCAL``.
"""

from __future__ import annotations

import json
import sys
import threading

from contextwright.stores.redis import RedisCache, RedisWakeup


def main() -> None:
    url, prefix, local = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cache = RedisCache(url, prefix=prefix, local=local)
    out_lock = threading.Lock()

    def say(obj: object) -> None:
        with out_lock:
            print(json.dumps(obj), flush=True)

    assert cache.wait_listening(10)
    say("ready")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd[0] == "get":
            say(cache.get(cmd[1], cmd[2]))
        elif cmd[0] == "set":
            cache.set(cmd[1], cmd[2], cmd[3], ttl=cmd[4], tags=cmd[5])
            say("ok")
        elif cmd[0] == "listen":
            wakeup = RedisWakeup(url, channel=prefix + "jobs")
            wakeup.listen(lambda: say("woke"))
            assert wakeup.wait_listening(10)
            say("listening")


if __name__ == "__main__":
    main()
