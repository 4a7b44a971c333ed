"""Two threads driving two sessions of one engine, the GIL released during evaluation,
batch_eval across sessions, adapters attached and detached per session."""
import threading
import time

from conftest import LORA_A, SMOL, STORIES, need

from cera import Engine, batch_eval, batch_sample


def test_two_threads_two_sessions():
    with Engine(need(STORIES), n_ctx=256, n_threads=2) as e:
        prompts = [e.tokenize("Once upon a time"), e.tokenize("The little dog")]
        alone = []
        for p in prompts:
            with e.session(temp=0) as s:
                alone.append(s.generate(p, max_tokens=120).tokens)
        out = [None, None]

        def work(i):
            with e.session(temp=0) as s:
                for _ in range(3):
                    s.truncate(0)
                    r = s.generate(prompts[i], max_tokens=120).tokens
                    assert r == alone[i]
                out[i] = r

        th = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert out == alone


def test_the_gil_is_released_during_eval():
    with Engine(need(SMOL), n_ctx=1024, n_threads=2) as e:
        toks = e.tokenize("The quick brown fox jumps over the lazy dog. " * 40)[:900]
        span = []

        def work():
            with e.session() as s:
                t0 = time.perf_counter()
                s.eval(toks)  # one foreign call
                span.append(time.perf_counter() - t0)

        th = threading.Thread(target=work)
        th.start()
        gaps, last = [], time.perf_counter()
        while th.is_alive():
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        th.join()
        # with the GIL held through the call this thread would stall for all of it
        assert span[0] > 0.05 and max(gaps) < span[0] / 2, (span, max(gaps))


def test_batch_eval_equals_alone():
    with Engine(need(STORIES), n_ctx=256, n_threads=2) as e:
        prompts = [e.tokenize("Once upon a time"), e.tokenize("The little dog ran"), e.tokenize("Lily")]
        alone = []
        for p in prompts:
            with e.session(temp=0) as s:
                s.eval(p)
                alone.append((s.logits(), s.sample()))
        ss = [e.session(temp=0) for _ in prompts]
        batch_eval(e, [(s, p) for s, p in zip(ss, prompts)])
        assert [s.logits() for s in ss] == [a[0] for a in alone]
        assert batch_sample(ss) == [a[1] for a in alone]
        for s in ss:
            s.close()


def test_adapters_attach_detach():
    with Engine(need(STORIES), n_ctx=256, n_threads=2) as e:
        a = e.load_adapter(need(LORA_A))
        p = e.tokenize("Once upon a time")
        with e.session(temp=0) as s:
            base = s.generate(p, max_tokens=30).tokens
            s.truncate(0)
            s.set_adapter(a, 1.0)
            assert s.n_adapters == 1
            tuned = s.generate(p, max_tokens=30).tokens
            assert tuned != base
            s.truncate(0)
            assert s.remove_adapter(a) and s.n_adapters == 0
            assert s.generate(p, max_tokens=30).tokens == base
            s.truncate(0)
            s.set_adapter(a, 0.0)  # attached but inert
            assert s.generate(p, max_tokens=30).tokens == base
        a.close()
