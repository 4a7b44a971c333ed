/*
 * test_serve_pace.c — the step-time model of `cera serve --itl-target` (tools/cera/serve_pace.c):
 * its predictions from known step times (the averages, interpolation between sizes, the
 * slope past the largest size and its floor, nothing known), the sizes it ignores, and
 * serve_pace_room against a search of every size on fresh random step times.
 */
#include <math.h>
#include <stdlib.h>

#include "serve_pace.h"
#include "testutil.h"

static bool near(double a, double b) { return fabs(a - b) < 1e-9; }

static void test_predict(void) {
    serve_pace p;
    CHECK(serve_pace_init(&p, 64), "init");
    CHECK(serve_pace_predict(&p, 5) == 0 && serve_pace_room(&p, 0, 10, 1.0) == 10,
          "nothing seen: no step is predicted to take time");
    serve_pace_observe(&p, 0, 100); /* ignored: sizes outside 1..cap, times that are no time */
    serve_pace_observe(&p, 65, 100);
    serve_pace_observe(&p, 2, NAN);
    CHECK(serve_pace_empty(&p), "nothing seen: empty");
    serve_pace_observe(&p, 1, 6.0);
    CHECK(!serve_pace_empty(&p), "a step seen: not empty");
    CHECK(near(serve_pace_predict(&p, 1), 6.0), "a size seen: its time");
    /* one size: past it, a quarter of its cost per token */
    CHECK(near(serve_pace_predict(&p, 3), 9.0), "past the only size: %g", serve_pace_predict(&p, 3));
    CHECK(serve_pace_room(&p, 0, 10, 9.0) == 3 && serve_pace_room(&p, 1, 10, 7.4) == 0, "the room");
    serve_pace_observe(&p, 4, 12.0);
    CHECK(near(serve_pace_predict(&p, 2), 8.0), "between two sizes: %g", serve_pace_predict(&p, 2));
    CHECK(near(serve_pace_predict(&p, 6), 16.0), "past them, their slope: %g", serve_pace_predict(&p, 6));
    serve_pace_observe(&p, 4, 22.0);
    CHECK(near(serve_pace_predict(&p, 4), 14.0), "a running average: %g", serve_pace_predict(&p, 4));
    serve_pace_observe(&p, 0, 100);
    serve_pace_observe(&p, 65, 100);
    serve_pace_observe(&p, 2, NAN);
    serve_pace_observe(&p, 2, -1);
    CHECK(near(serve_pace_predict(&p, 2), 6.0 + 8.0 / 3), "bad observations ignored: %g",
          serve_pace_predict(&p, 2));
    CHECK(serve_pace_predict(&p, 200) > serve_pace_predict(&p, 64), "past the cap: still growing");
    serve_pace_free(&p);

    /* noise that makes larger steps look cheaper: the slope never drops under a quarter of the
     * mean cost per token */
    CHECK(serve_pace_init(&p, 16), "init");
    serve_pace_observe(&p, 2, 6.0);
    serve_pace_observe(&p, 3, 5.0);
    CHECK(near(serve_pace_predict(&p, 5), 5.0 + 2 * 5.0 / 3 / 4), "the slope's floor: %g",
          serve_pace_predict(&p, 5));
    CHECK(near(serve_pace_predict(&p, 1), 6.0), "under the smallest size: no cheaper than it");
    serve_pace_free(&p);
}

/* room(base, max, target) is the largest k <= max with predict(base + k) <= target, for step
 * times that grow with the size (as they do, give or take noise) */
static void test_room(void) {
    srand(20261202u);
    for (int round = 0; round < 200; round++) {
        serve_pace p;
        const int cap = 8 + rand() % 120;
        CHECK(serve_pace_init(&p, cap), "init");
        double t = 1 + rand() % 10;
        for (int n = 1; n <= cap; n++) {
            t += (rand() % 100) / 50.0;
            if (rand() % 3 == 0) serve_pace_observe(&p, n, t);
        }
        const int base = rand() % cap, max = rand() % 64;
        const double target = serve_pace_predict(&p, 1 + rand() % (cap + 20));
        int want = 0;
        for (int k = 1; k <= max; k++)
            if (serve_pace_predict(&p, base + k) <= target)
                want = k;
            else
                break;
        const int got = serve_pace_room(&p, base, max, target);
        CHECK(got == want, "round %d: room(%d, %d, %g) = %d, want %d", round, base, max, target, got, want);
        serve_pace_free(&p);
    }
}

int main(void) {
    test_predict();
    test_room();
    return test_finish();
}
