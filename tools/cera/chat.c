/*
 * chat.c — `cera chat`: a multi-turn conversation with a model in the terminal.
 *
 * Each turn renders the whole conversation with the model's chat template (or
 * --template), tokenizes it, and evaluates only what is new: the longest common prefix
 * with the tokens the session holds stays in the KV cache. The answer streams to stdout.
 * On a terminal the input line is edited with libedit (history included); Ctrl-C stops
 * an answer (what came so far stays in the conversation) and clears the line being
 * typed; Ctrl-D or /exit ends; /reset starts a new conversation (the system message
 * stays). When stdin is not a terminal, each line is one user turn (scriptable).
 * A grammar option (--grammar, --grammar-file, -j/--json-schema, --json) constrains each
 * answer on its own: the turn's truncate restarts the grammar (cera.h).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <editline/readline.h>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "gen.h"
#include "prompt.h"

#define CHAT_GROUPS                                                                                          \
    (CLI_G_MODEL | CLI_G_SAMPLE | CLI_G_GEN | CLI_G_LORA | CLI_G_CHAT | CLI_G_GRAMMAR | CLI_G_SPEC)
#define CHAT_MAX_TURNS 4096

typedef struct chat {
    cera_engine *e;
    cera_session *s;
    cera_engine *de; /* speculative decoding's draft model (-md), or NULL */
    cera_session *ds;
    int n_drafted, n_accepted;
    cera_chat_template *tmpl;
    cera_chat_message msg[CHAT_MAX_TURNS];
    char *owned[CHAT_MAX_TURNS]; /* the messages' texts */
    int n_msg, n_system;
    cera_token *hist; /* the tokens the session holds: evaluated, then the pending one */
    size_t n_hist, cap_hist;
    char *reply; /* the answer being streamed */
    size_t n_reply, cap_reply;
    bool oom;
    double t_first;
} chat;

static bool push_hist(chat *c, cera_token t) {
    if (c->n_hist == c->cap_hist) {
        const size_t cap = c->cap_hist ? 2 * c->cap_hist : 1024;
        cera_token *h = realloc(c->hist, cap * sizeof *h);
        if (!h) return false;
        c->hist = h;
        c->cap_hist = cap;
    }
    c->hist[c->n_hist++] = t;
    return true;
}

static bool on_token(cera_token token, const char *piece, size_t len, void *user) {
    chat *c = user;
    if (token >= 0) {
        if (c->t_first == 0) c->t_first = cli_now();
        if (!push_hist(c, token)) c->oom = true;
    }
    if (c->n_reply + len + 1 > c->cap_reply) {
        const size_t cap = (c->n_reply + len + 1) * 2;
        char *r = realloc(c->reply, cap);
        if (!r) {
            c->oom = true;
            return false;
        }
        c->reply = r;
        c->cap_reply = cap;
    }
    memcpy(c->reply + c->n_reply, piece, len);
    c->n_reply += len;
    c->reply[c->n_reply] = 0;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return !c->oom;
}

static bool add_message(chat *c, const char *role, const char *text) {
    if (c->n_msg == CHAT_MAX_TURNS) return false;
    char *t = strdup(text);
    if (!t) return false;
    c->owned[c->n_msg] = t;
    c->msg[c->n_msg] = (cera_chat_message){.role = role, .content = t};
    c->n_msg++;
    return true;
}

static void drop_messages(chat *c, int keep) {
    while (c->n_msg > keep) free(c->owned[--c->n_msg]);
}

/* One turn: the conversation rendered, its new tokens evaluated, the answer generated.
 * Returns CERA_OK, CERA_ERR_CANCELLED (the answer stopped by Ctrl-C) or an error. */
static cera_status turn(chat *c, const cli_args *a, bool tty, cera_error *err) {
    cera_chat_params cp = cera_chat_default_params();
    cp.extra = a->chat_kwargs;
    char *text = NULL;
    cera_token *toks = NULL;
    size_t len = 0, n = 0;
    cera_status st = cera_chat_render(c->tmpl, c->msg, (size_t)c->n_msg, &cp, &text, &len, err);
    if (st == CERA_OK) st = cera_chat_tokenize(c->e, text, len, &toks, &n, err);
    cera_free(text);
    if (st != CERA_OK) return st;

    /* keep the longest common prefix (a recurrent model keeps all or nothing) */
    size_t keep = 0;
    const size_t n_past = (size_t)cera_session_n_past(c->s);
    while (keep < n && keep < c->n_hist && keep < n_past && toks[keep] == c->hist[keep]) keep++;
    if (keep == n && keep > 0) keep--; /* the last prompt token is evaluated again: its logits */
    if (cera_session_truncate(c->s, (int)keep, NULL) != CERA_OK) {
        keep = 0;
        st = cera_session_truncate(c->s, 0, err);
    }
    c->n_hist = keep;
    const double t0 = cli_now();
    if (st == CERA_OK) st = cli_eval_prompt(c->s, toks + keep, n - keep, a->ep.n_batch, err);
    for (size_t i = keep; st == CERA_OK && i < n; i++)
        if (!push_hist(c, toks[i])) st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    free(toks);
    if (st != CERA_OK) return st;

    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = a->n_predict;
    gp.stop = a->stop;
    gp.n_stop = a->n_stop;
    gp.ignore_eog = a->ignore_eos;
    gp.cancel = &cli_cancel_flag;
    gp.context_shift = a->ctx_shift != 0; /* on unless --no-context-shift */
    gp.n_keep = cli_keep_positions(c->e, a->keep, c->hist, c->n_hist);
    cli_spec_apply(a, &gp);
    gp.draft = c->ds;
    int drafted = 0, accepted = 0;
    gp.n_drafted = &drafted;
    gp.n_accepted = &accepted;
    c->n_reply = 0;
    c->t_first = 0;
    c->oom = false;
    int n_gen = 0;
    const double t1 = cli_now();
    st = cera_generate(c->s, NULL, 0, &gp, on_token, c, &n_gen, err);
    const double t2 = cli_now();
    c->n_drafted += drafted;
    c->n_accepted += accepted;
    /* a context shift dropped tokens from the session: its timeline is no longer the history's
     * beyond the kept start, so the next turn evaluates its conversation afresh */
    if ((size_t)cera_session_n_past(c->s) < c->n_hist) c->n_hist = 0;
    if (c->oom) st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    printf("\n");
    fflush(stdout);
    if (st == CERA_OK || st == CERA_ERR_CANCELLED) {
        if (!add_message(c, "assistant", c->reply ? c->reply : ""))
            return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory (or %d turns)", CHAT_MAX_TURNS);
        fprintf(stderr, "%s[%zu prompt tokens, %zu new, first token %.2f s; %d tokens, %.1f tok/s]%s\n",
                tty ? "\033[2m" : "", n, n - keep, c->t_first > 0 ? c->t_first - t0 : 0.0, n_gen,
                n_gen / (t2 - t1 > 0 ? t2 - t1 : 1e-9), tty ? "\033[0m" : "");
        if (st == CERA_ERR_CANCELLED)
            fprintf(stderr, "cera: answer stopped (Ctrl-C)\n");
        else if (cera_session_grammar_state(c->s) == CERA_GRAMMAR_DEAD_END)
            fprintf(stderr, "cera: the grammar allows no further token (its match is not complete)\n");
        else if (cera_session_n_past(c->s) >= cera_engine_n_ctx(c->e))
            fprintf(stderr,
                    "cera: the context is full (%d tokens): /reset starts again; -c N sets a larger one\n",
                    cera_engine_n_ctx(c->e));
    }
    return st;
}

static bool line_interrupted;

/* libedit's character source: a Ctrl-C while a line is typed ends the line (as end of
 * input, which read_line tells apart by line_interrupted) instead of being retried. The
 * flag is checked with SIGINT blocked and the wait (ppoll) unblocks it atomically, so a
 * Ctrl-C that lands between the check and the wait still ends it. */
static int getc_interruptible(FILE *f) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    sigdelset(&old, SIGINT);
    int ch = EOF;
    for (;;) {
        if (__atomic_load_n(&cli_cancel_flag, __ATOMIC_RELAXED)) {
            line_interrupted = true;
            break;
        }
        struct pollfd p = {fileno(f), POLLIN, 0};
        const int r = ppoll(&p, 1, NULL, &old);
        if (r < 0 && errno == EINTR) continue;
        unsigned char c;
        if (r > 0 && read(fileno(f), &c, 1) == 1) ch = c;
        break;
    }
    pthread_sigmask(SIG_UNBLOCK, &block, NULL);
    return ch;
}

/* The next user line (malloc'ed, no newline), or NULL at the end of input. *interrupted
 * says that Ctrl-C cleared the line instead. */
static char *read_line(bool tty, bool *interrupted) {
    *interrupted = false;
    if (tty) {
        line_interrupted = false;
        char *line = readline("> ");
        if (line_interrupted) {
            cli_cancel_clear();
            *interrupted = true;
            free(line);
            printf("\n");
            return NULL;
        }
        if (line && *line) add_history(line);
        return line;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    errno = 0;
    while ((n = getline(&line, &cap, stdin)) < 0 && errno == EINTR) {
        clearerr(stdin);
        errno = 0;
    }
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n') line[--n] = 0;
    if (n > 0 && line[n - 1] == '\r') line[--n] = 0;
    return line;
}

int cmd_chat(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a);
    int rc = cli_parse("chat", CHAT_GROUPS, argc, argv, &a, NULL, NULL,
                       "usage: cera chat -m MODEL [-sys TEXT] [--template FILE|NAME] [options]\n\n"
                       "Chats with the model: each line you type is a user turn; the answer streams back.\n"
                       "/reset starts a new conversation, /exit (or Ctrl-D) ends, Ctrl-C stops an answer.\n"
                       "-n limits each answer. With stdin not a terminal, each line of it is a turn.\n",
                       NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = cli_args_finish("chat", CHAT_GROUPS, &a))) goto out_args;
    if (!a.model) {
        rc = cli_usage_error("chat", "-m MODEL is required (see --help)");
        goto out_args;
    }
    cJSON *kw = a.chat_kwargs ? cJSON_Parse(a.chat_kwargs) : NULL;
    const bool kw_ok = !a.chat_kwargs || cJSON_IsObject(kw);
    cJSON_Delete(kw);
    if (!kw_ok) {
        rc = cli_usage_error("chat", "--chat-template-kwargs is not a JSON object: %s", a.chat_kwargs);
        goto out_args;
    }
    chat *c = calloc(1, sizeof *c);
    cera_error err = {0};
    rc = 1;
    if (!c) {
        fprintf(stderr, "cera: out of memory\n");
        goto out_args;
    }
    const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    cli_cancel_prepare();
    double load_s = 0;
    if (cli_open_engine(a.model, &a.ep, &c->e, &load_s, &err)) goto fail;
    fprintf(stderr, "cera: loaded %s (%s) in %.2f s\n", a.model, cera_engine_arch(c->e), load_s);
    cli_warn_context(c->e, a.ep.n_ctx);
    if (cli_open_template(a.chat_template, c->e, "--template FILE", &c->tmpl, &err)) goto fail;
    cera_session_params sp = cera_session_default_params();
    sp.sampler = a.sp;
    if (cera_session_create(c->e, &sp, &c->s, &err)) goto fail;
    if (cli_lora_attach(c->e, c->s, &a.lora, &err)) goto fail;
    cera_generate_params spec = cera_generate_default_params(); /* the draft model, when -md */
    if (cli_spec_open(&a, c->e, &spec, &c->de, &c->ds, &err)) goto fail;
    char *gbnf = NULL;
    size_t gbnf_len = 0;
    if (cli_args_grammar(&a, &gbnf, &gbnf_len, &err)) goto fail;
    const cera_status gst = gbnf ? cera_session_set_grammar(c->s, gbnf, gbnf_len, &err) : CERA_OK;
    free(gbnf);
    if (gst) goto fail;
    if (a.system && !add_message(c, "system", a.system)) goto oom;
    c->n_system = c->n_msg;
    if (a.seed_drawn && a.sp.temp > 0) fprintf(stderr, "cera: seed %lld\n", a.seed);
    if (tty) fprintf(stderr, "cera: chatting with %s; /reset, /exit, Ctrl-C stops an answer\n", a.model);
    cli_cancel_install();
    rl_catch_signals = 0; /* Ctrl-C reaches cli_cancel_flag, read by getc_interruptible */
    rl_getc_function = getc_interruptible;
    rc = 0;
    for (;;) {
        bool interrupted;
        char *line = read_line(tty, &interrupted);
        if (!line) {
            if (interrupted) continue;
            break;
        }
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) {
            free(line);
            break;
        }
        if (!strcmp(line, "/reset")) {
            free(line);
            drop_messages(c, c->n_system);
            c->n_hist = 0;
            if (cera_session_truncate(c->s, 0, &err)) goto fail;
            fprintf(stderr, "cera: new conversation\n");
            continue;
        }
        if (!*line) {
            free(line);
            continue;
        }
        const bool added = add_message(c, "user", line);
        free(line);
        if (!added) goto oom;
        cli_cancel_clear();
        const cera_status st = turn(c, &a, tty, &err);
        cli_cancel_clear();
        if (st == CERA_ERR_CANCELLED) continue;
        if (st == CERA_ERR_CONTEXT_FULL) {
            drop_messages(c, c->n_msg - 1); /* the turn that did not fit */
            fprintf(stderr, "cera: %s: /reset starts again; -c N sets a larger context\n", err.message);
            rc = 1;
            continue;
        }
        if (st != CERA_OK) goto fail;
    }
    goto out;
oom:
    cera_fail(&err, CERA_ERR_NO_MEMORY, "out of memory (or %d turns)", CHAT_MAX_TURNS);
fail:
    rc = cli_fail(&err);
out:
    drop_messages(c, 0);
    free(c->hist);
    free(c->reply);
    cera_chat_template_free(c->tmpl);
    cli_spec_report(c->n_drafted, c->n_accepted);
    cera_session_free(c->s);
    cli_spec_close(c->de, c->ds);
    cera_engine_close(c->e);
    free(c);
out_args:
    cli_args_free(&a);
    return rc;
}
