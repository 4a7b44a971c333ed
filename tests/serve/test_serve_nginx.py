#!/usr/bin/env python3
"""test_serve_nginx.py CERA SHARED — deploy/nginx run for real: three stories260K `cera serve`
replicas on loopback behind nginx, started as a non-root user with a temporary prefix:
session affinity (the prefix cache stays warm), SSE through unbuffered, a killed replica's
sessions moving to the others while the rest keep theirs, cera-health.sh marking it down.
Exit code 77 (skipped) without nginx, the openai client or stories260K."""
import http.client
import json
import os
import socket
import subprocess
import sys
import time

import test_serve as ts


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def group_nginx(cera, shared):
    """deploy/nginx: three replicas behind nginx, started as a non-root user on loopback
    with a temporary prefix: sessions stick to a replica (their prefix cache stays warm),
    SSE streams through unbuffered, a killed replica's sessions move to the others while the
    rest keep theirs, and cera-health.sh marks it down."""
    import pwd
    import shutil
    import tempfile
    try:
        import openai
    except ImportError:
        print("skip: the openai Python client is not installed")
        return ts.SKIP
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    model = os.path.join(shared, "models", "stories260K.gguf")
    if not nginx or not os.path.exists(model):
        print("skip: no nginx (scripts/setup.sh installs it) or no stories260K")
        return ts.SKIP
    deploy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "nginx")
    reps = [ts.Server(cera, ["-m", model, "-c", "256", "--parallel", "4"]) for _ in range(3)]
    tmp = tempfile.mkdtemp(prefix="cera-nginx-")
    ng = None
    try:
        port = free_port()
        with open(os.path.join(deploy, "nginx.conf.in")) as f:
            conf = f.read().replace("@PREFIX@", tmp).replace("@LISTEN@", "127.0.0.1:%d" % port)
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write(conf)
        addrs = ["127.0.0.1:%d" % r.port for r in reps]
        with open(os.path.join(tmp, "upstreams.conf"), "w") as f:
            f.write("".join("server %s max_fails=1 fail_timeout=10s;\n" % a for a in addrs))
        pre = None
        if os.geteuid() == 0:  # as root: nginx runs as nobody, over a prefix it owns
            nobody = pwd.getpwnam("nobody")
            for dp, dn, fn in os.walk(tmp):
                for x in [dp] + [os.path.join(dp, y) for y in fn]:
                    os.chown(x, nobody.pw_uid, nobody.pw_gid)

            def pre():
                os.setgid(nobody.pw_gid)
                os.setgroups([])
                os.setuid(nobody.pw_uid)
        ng = subprocess.Popen([nginx, "-p", tmp, "-c", os.path.join(tmp, "nginx.conf"), "-e",
                               os.path.join(tmp, "error.log"), "-g", "daemon off;"], preexec_fn=pre,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = "http://127.0.0.1:%d" % port
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if ng.poll() is not None:
                    raise RuntimeError("nginx did not start: " + ng.stderr.read().decode())
                time.sleep(0.05)

        def req(path, body, session, timeout=60):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            h = {"Content-Type": "application/json"}
            if session is not None:
                h["X-Session-Id"] = session
            c.request("POST" if body is not None else "GET", path, json.dumps(body) if body else None, h)
            r = c.getresponse()
            data = r.read()
            c.close()
            return r.status, r.getheader("X-Cera-Replica"), data

        st, rep, data = req("/health", None, None)
        ts.check(st == 200 and rep in addrs, "health through nginx: %s %s" % (st, rep))
        # affinity: every request of a session lands on one replica, and its prefix is cached there
        where = {}
        for k in range(12):
            sess = "session-%d" % k
            body = {"model": "stories260K", "prompt": "Once upon a time, %d little cats" % k, "max_tokens": 8,
                    "temperature": 0}
            seen, cached = set(), []
            for _ in range(3):
                st, rep, data = req("/v1/completions", body, sess)
                ts.check(st == 200, "a completion through nginx: %s %s" % (st, data[:200]))
                seen.add(rep)
                cached.append(json.loads(data)["usage"]["prompt_tokens_details"]["cached_tokens"])
            ts.check(len(seen) == 1, "%s stays on one replica: %s" % (sess, seen))
            ts.check(cached[1] > cached[0] and cached[2] == cached[1] and cached[1] == json.loads(data)["usage"][
                "prompt_tokens"] - 1, "%s reuses its whole prompt from the second request on: %s" % (sess, cached))
            where[sess] = seen.pop()
        ts.check(len(set(where.values())) >= 2, "sessions spread over the replicas: %s" % where)
        # streaming through nginx: the same text as whole, the first event before the end
        cl = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0,
                           default_headers={"X-Session-Id": "session-0"})
        whole = cl.completions.create(model="stories260K", prompt="The cat", temperature=0, max_tokens=200,
                                      extra_body={"ignore_eos": True}).choices[0].text
        t0, first, parts = time.time(), None, []
        for ch in cl.completions.create(model="stories260K", prompt="The cat", temperature=0, max_tokens=200,
                                        stream=True, extra_body={"ignore_eos": True}):
            if first is None:
                first = time.time() - t0
            if ch.choices:
                parts.append(ch.choices[0].text)
        total = time.time() - t0
        ts.check("".join(parts) == whole, "streamed through nginx == whole")
        ts.check(first is not None and first < total / 2,
              "the first event comes before the end (unbuffered): %.3f of %.3f s" % (first or -1, total))
        # a replica killed: its sessions go to the others, the rest keep theirs
        victim = where["session-0"]
        vi = addrs.index(victim)
        reps[vi].p.kill()
        reps[vi].p.wait()
        for sess, rep in where.items():
            st, now, data = req("/v1/completions", {"model": "stories260K", "prompt": "Once upon", "max_tokens": 4},
                                sess)
            ts.check(st == 200, "%s answered with a replica down: %s %s" % (sess, st, data[:200]))
            if rep == victim:
                ts.check(now != victim, "%s moved off the killed replica" % sess)
            else:
                ts.check(now == rep, "%s keeps its replica %s (now %s)" % (sess, rep, now))
        # the active check marks it down (and reloads nginx)
        env = dict(os.environ)
        if os.geteuid() == 0:
            rc = subprocess.run(["runuser", "-u", "nobody", "--", "bash", os.path.join(deploy, "cera-health.sh"),
                                 tmp] + addrs, capture_output=True, text=True)
        else:
            rc = subprocess.run(["bash", os.path.join(deploy, "cera-health.sh"), tmp] + addrs, capture_output=True,
                                text=True, env=env)
        ts.check(rc.returncode == 0, "cera-health.sh: %s" % rc.stderr)
        with open(os.path.join(tmp, "upstreams.conf")) as f:
            ups = f.read()
        ts.check(("server %s max_fails=1 fail_timeout=10s down;" % victim) in ups and ups.count(" down;") == 1,
              "cera-health.sh marks the killed replica down: %s" % ups)
        time.sleep(0.5)
        st, rep, data = req("/v1/completions", {"model": "stories260K", "prompt": "Once upon", "max_tokens": 4},
                            "session-0")
        ts.check(st == 200 and rep != victim, "after the reload: %s %s" % (st, rep))
    finally:
        if ng:
            ng.terminate()
            try:
                ng.wait(timeout=10)
            except subprocess.TimeoutExpired:
                ng.kill()
        for r in reps:
            if r.p.poll() is None:
                r.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main():
    rc = group_nginx(sys.argv[1], sys.argv[2])
    if rc == ts.SKIP:
        return ts.SKIP
    if ts.failures:
        print("%d failures" % len(ts.failures), file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
