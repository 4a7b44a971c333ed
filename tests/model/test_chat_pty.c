/*
 * test_chat_pty.c — `cera chat` in a pseudo-terminal, as a person uses it: the line
 * editor's prompt, a turn, Ctrl-C stopping a long answer (the program goes on), Ctrl-C
 * clearing a half-typed line, /reset, and /exit ending with status 0. Uses SmolLM2
 * (scripts/setup.sh fetches it; skipped when absent), whose answers take long enough for
 * a Ctrl-C to land in the middle of one (--ignore-eos, a large -n).
 */
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static int master = -1;
static char seen[1 << 20];
static size_t n_seen;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reads what the terminal shows until `want` appears after offset `from` (true) or
 * `secs` pass (false). */
static bool wait_for(const char *want, size_t from, double secs) {
    const double end = now() + secs;
    for (;;) {
        seen[n_seen] = 0;
        if (from <= n_seen && strstr(seen + from, want)) return true;
        const double left = end - now();
        if (left <= 0) return false;
        struct pollfd p = {master, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        const ssize_t r = read(master, seen + n_seen, sizeof seen - 1 - n_seen);
        if (r <= 0) return false;
        n_seen += (size_t)r;
    }
}

static void type(const char *s) {
    if (write(master, s, strlen(s)) < 0) perror("write");
}

int main(void) {
    const char *model = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!file_exists(model)) {
        printf("skipped: %s not present (scripts/setup.sh fetches it)\n", model);
        return TEST_SKIP_CODE;
    }
    struct winsize ws = {.ws_row = 40, .ws_col = 200};
    const pid_t pid = forkpty(&master, NULL, NULL, &ws);
    if (pid == 0) {
        setenv("TERM", "xterm", 1);
        execl(CERA_CLI, CERA_CLI, "chat", "-m", model, "--temp", "0", "--ignore-eos", "-n", "4000", "-c",
              "4096", "-t", "1", "--device", "cpu", (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0, "forkpty: %s", strerror(errno));
    if (pid <= 0) return test_finish();

    CHECK(wait_for("> ", 0, 60), "no prompt; the terminal showed:\n%s", seen);
    size_t mark = n_seen;
    type("Tell me a long story about a dragon.\r");
    /* the answer streams: wait for some of it, then Ctrl-C */
    CHECK(wait_for("dragon", mark, 10), "the line was not echoed:\n%s", seen + mark);
    mark = n_seen;
    const double t0 = now();
    while (n_seen < mark + 40 && now() - t0 < 30) wait_for("\x01", mark, 0.2); /* some answer text */
    CHECK(n_seen >= mark + 40, "no answer streamed:\n%s", seen + mark);
    type("\x03");
    CHECK(wait_for("answer stopped", mark, 20), "Ctrl-C did not stop the answer:\n%s", seen + mark);
    mark = (size_t)(strstr(seen + mark, "answer stopped") - seen);
    CHECK(wait_for("> ", mark, 10), "no prompt after Ctrl-C:\n%s", seen + mark);
    CHECK(waitpid(pid, NULL, WNOHANG) == 0, "cera chat exited on Ctrl-C");

    /* Ctrl-C on a half-typed line clears it; the program stays */
    mark = n_seen;
    type("half a line");
    wait_for("half a line", mark, 5);
    type("\x03");
    mark = n_seen;
    CHECK(wait_for("> ", mark, 10), "no fresh prompt after Ctrl-C on a line:\n%s", seen + mark);
    CHECK(waitpid(pid, NULL, WNOHANG) == 0, "cera chat exited on Ctrl-C at the prompt");

    mark = n_seen;
    type("/reset\r");
    CHECK(wait_for("new conversation", mark, 10), "/reset:\n%s", seen + mark);
    mark = (size_t)(strstr(seen + mark, "new conversation") - seen);
    CHECK(wait_for("> ", mark, 10), "no prompt after /reset");
    type("/exit\r");
    int status = -1;
    for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; i++) {
        wait_for("\x01", n_seen, 0.05); /* drain the terminal */
        usleep(50000);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "/exit: status %d; the terminal showed:\n%s", status,
          seen);
    if (!WIFEXITED(status)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(master);
    return test_finish();
}
