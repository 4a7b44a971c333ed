/*
 * gen.c — the pieces `cera run` and `cera chat` share (gen.h): Ctrl-C, timed loading,
 * the prompt's progress, and the reason a generation stopped.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "gen.h"
#include "prompt.h"

volatile int cli_cancel_flag;

static void on_sigint(int sig) {
    (void)sig;
    __atomic_store_n(&cli_cancel_flag, 1, __ATOMIC_RELAXED);
}

void cli_cancel_prepare(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void cli_cancel_install(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: a read waiting for a line returns */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

void cli_cancel_clear(void) { __atomic_store_n(&cli_cancel_flag, 0, __ATOMIC_RELAXED); }

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_progress(float done, void *user) {
    fprintf(stderr, "\rcera: loading %s: %3.0f %%\033[K", (const char *)user, 100.0 * done);
}

cera_status cli_open_engine(const char *model, const cera_engine_params *ep, cera_engine **out,
                            double *load_s, cera_error *err) {
    const bool tty = isatty(STDERR_FILENO);
    cera_engine_params p = *ep;
    if (tty) {
        p.progress = on_progress;
        p.progress_user = (void *)model;
    }
    const double t0 = cli_now();
    const cera_status st = cera_engine_open(model, &p, out, err);
    *load_s = cli_now() - t0;
    if (tty) fprintf(stderr, "\r\033[K");
    return st;
}

cera_status cli_open_template(const char *t, const cera_engine *e, const char *option,
                              cera_chat_template **out, cera_error *err) {
    if (t && (access(t, F_OK) == 0 || strchr(t, '/') || strchr(t, '.'))) { /* a file, not a name */
        size_t len;
        char *text = cli_read_file(t, &len, err);
        if (!text) return err->status;
        const cera_status st = cera_chat_template_open(e, NULL, text, len, out, err);
        free(text);
        if (st) cera_error_prefix(err, "%s", t);
        return st;
    }
    cera_status st = cera_chat_template_open(e, t, NULL, 0, out, err);
    if (st == CERA_ERR_NOT_FOUND && !t) {
        fprintf(stderr, "cera: the model has no chat template: using ChatML (%s gives another)\n", option);
        st = cera_chat_template_open(e, "chatml", NULL, 0, out, err);
    }
    return st;
}

cera_status cli_eval_prompt(cera_session *s, const cera_token *toks, size_t n, int n_batch, cera_error *err) {
    const size_t chunk = n_batch > 0 ? (size_t)n_batch : 512;
    const bool show = n > chunk && isatty(STDERR_FILENO);
    const double t0 = cli_now();
    cera_status st = CERA_OK;
    for (size_t i = 0; i < n && st == CERA_OK; i += chunk) {
        if (__atomic_load_n(&cli_cancel_flag, __ATOMIC_RELAXED)) {
            st = CERA_ERR_CANCELLED;
            if (err) {
                err->status = st;
                snprintf(err->message, sizeof err->message, "prompt evaluation cancelled");
            }
            break;
        }
        if (show) {
            const double dt = cli_now() - t0;
            fprintf(stderr, "\rcera: prompt %zu/%zu tokens", i, n);
            if (i > 0 && dt > 0)
                fprintf(stderr, " (%.0f tok/s, %.0f s left)", (double)i / dt,
                        dt * (double)(n - i) / (double)i);
            fprintf(stderr, "\033[K");
        }
        st = cera_session_eval(s, toks + i, n - i < chunk ? n - i : chunk, false, err);
    }
    if (show) fprintf(stderr, "\r\033[K");
    return st;
}

int cli_keep_positions(const cera_engine *e, int keep, const cera_token *prompt, size_t n) {
    if (keep < 0 || (size_t)keep > n) return (int)n;
    return keep + (n > 0 && prompt[0] == cera_engine_bos(e) ? 1 : 0);
}

int cli_report_end(cera_status st, const cera_error *err, const cera_session *s, int n_ctx, int n_predict,
                   int n_gen) {
    if (st == CERA_ERR_CANCELLED) {
        fprintf(stderr, "cera: stopped by Ctrl-C after %d tokens\n", n_gen);
        return 1;
    }
    if (st != CERA_OK) {
        fprintf(stderr, "cera: %s%s\n", err && err->message[0] ? err->message : cera_status_str(st),
                st == CERA_ERR_CONTEXT_FULL ? " (-c N sets a larger context)" : "");
        return 1;
    }
    if (cera_session_n_past(s) >= n_ctx && (n_predict < 0 || n_gen < n_predict)) {
        fprintf(stderr,
                "cera: generation stopped at the context limit (%d tokens) after %d tokens%s; -c N sets a "
                "larger context\n",
                n_ctx, n_gen, n_predict < 0 ? "" : ", before -n was reached");
        return n_predict >= 0 ? 1 : 0;
    }
    return 0;
}
