/*
 * Funnel's Redis module: the funnel's decision (GCRA), fixed and sliding
 * windows, takes under several limits at once, a concurrency limit's
 * acquires and releases, and takes on a packed sliding log, in C, for a
 * Redis that may load modules. Funnel's Redis store uses it when Redis has
 * loaded it, and its Lua scripts (redisstore/gcra.lua, window.lua,
 * takes.lua, conc.lua, log.lua) otherwise; a command and its script take the same arguments, give the
 * same replies and leave the same keys, so a store can move between them
 * (and to or from redis-cell) without resetting a limit.
 *
 *   FUNNEL.GCRA version numkeys key [key ...] arg [arg ...]
 *   FUNNEL.WINDOW version numkeys key [key ...] arg [arg ...]
 *   FUNNEL.TAKES version numkeys key [key ...] arg [arg ...]
 *   FUNNEL.CONC version 1 key arg [arg ...]
 *   FUNNEL.LOG version 1 key arg [arg ...]
 *
 * FUNNEL.WINDOW is window.lua, whose header says what its keys, args and
 * reply are: takes of fixed windows of a period and of sliding window
 * counters, each request decided and written in turn.
 *
 * FUNNEL.CONC is conc.lua, whose header says what its key, args and reply
 * are: one acquire or release of a lease on a sorted set of leases (and
 * the marker of its unit delay), read with the module API's sorted set
 * functions and written through Redis (ZADD, ZREM, ZREMRANGEBYSCORE,
 * PEXPIRE, DEL) as the script writes it; a key that holds anything else
 * is answered -1, as the script answers it, and left to family.lua.
 *
 * FUNNEL.LOG is log.lua, whose header says what its key, args and reply
 * are: one take on a sliding log packed in a string (six bytes an entry),
 * read in place and written by SET as the script's PSETEX; a key that
 * holds anything else is answered -1 and left to family.lua.
 *
 * FUNNEL.TAKES is takes.lua, whose header says what its keys, args and
 * reply are: takes of funnels and delaying buckets ("g", "l"), fixed
 * windows of a period or a calendar's ("f", "d") and sliding window
 * counters ("s"), all or nothing. Its windows are computed on doubles, as
 * Lua computes them, so that any value a key holds is read as the script
 * reads it (numbers past 2^53 included), and so are FUNNEL.WINDOW's; their
 * arguments must be integers of magnitude below 2^53, as Funnel's store
 * sends them. What follows is about FUNNEL.GCRA, and holds for the others'
 * funnels and writes.
 *
 * version is the version of the arguments' and replies' contract that the
 * caller speaks: this module speaks "1" and answers any other with an error
 * that starts with "ERR funnel: version", which changes nothing (a store
 * then goes back to its script). The keys and args are gcra.lua's KEYS and
 * ARGV: its header says what each means and what the reply is. In short,
 * each key holds redis-cell's format (the theoretical arrival time, TAT, as
 * a decimal count of nanoseconds since the Unix epoch, expiring when the
 * TAT is reached); args[1] is "t" or "u" (a batch under one limit, each key
 * once); args[2] and args[3] take the time from Redis's clock ("" and
 * anything, "-" and a deadline in µs, "~µs" and a deadline: see now.lua) or
 * give it (seconds and nanoseconds, for tests); args[4] is milliseconds
 * added to every expiry; then come the requests' arguments and the limits'
 * limbs (seconds rounded down, then nanoseconds) of cost and tolerance.
 *
 * Where gcra.lua computes on two limbs of doubles, this computes on 128-bit
 * integers: the results are the same for every argument that gcra.lua
 * accepts. Arguments that it would fail on in the middle of a call (a
 * missing limb, a request that names a later one) are refused here before
 * any key is read, with an error that starts with "ERR funnel:".
 *
 * A call decides its requests, then writes its keys, as the script does
 * through redis.call: Redis's own SET key value PXAT ms (the script's
 * PSETEX, which Redis replicates as that) or DEL, under the checks Redis
 * makes of a script's writes (maxmemory, a read-only replica, a failed
 * save, too few replicas, the caller's ACL), with the same keyspace events,
 * replication and AOF. A write that Redis refuses answers its error for the
 * whole call, as the script's would. A value is thus kept as the script and
 * redis-cell leave it, a number in Redis's integer encoding, but for one
 * thing: the module API reads a string only as plain bytes, so reading a
 * key turns its value into a plain string (32 bytes more, the same value)
 * until its next write, a refused request's key included.
 *
 * Loaded with the arguments "encoding raw", the module writes a value in
 * place instead, as a plain string, for less of Redis's CPU and 32 bytes
 * more a key (see the README's benchmarks), replicated and notified the
 * same; a call's first SET still goes through Redis, for its checks.
 *
 * The caller promises what Funnel's store does: in a "u" call each key
 * comes once, and in a "t" call a key that comes more than once says so in
 * its requests' arguments. This module decides a call that breaks it one
 * request after the other; the script, which reads every key first, does
 * not.
 *
 * Build: cc -O2 -fPIC -shared -ffp-contract=off -o funnel.so funnel.c
 *        (no fused multiply-adds: the windows' doubles as Lua's)
 * Load:  redis-server --loadmodule /path/to/funnel.so [encoding int|raw]
 *        (Redis 7.0 or newer)
 *
 * The module API is reached as the API defines it: the first pointer of the
 * context that Redis passes to RedisModule_OnLoad is a function that looks
 * up every other function by name.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* The contract version that this module speaks (see above). */
#define FUNNEL_VERSION "1"

/* --- The part of Redis's module API that this module uses. --- */

#define RM_OK 0
#define RM_ERR 1
#define RM_APIVER_1 1
#define RM_READ (1 << 0)
#define RM_WRITE (1 << 1)
#define RM_KEYTYPE_EMPTY 0
#define RM_KEYTYPE_STRING 1
#define RM_KEYTYPE_ZSET 5
#define RM_NOTIFY_GENERIC (1 << 2)
#define RM_NOTIFY_STRING (1 << 3)

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

static int (*GetApi)(const char *name, void *fn);
static void (*SetModuleAttribs)(RedisModuleCtx *ctx, const char *name, int ver, int apiver);
static int (*IsModuleNameBusy)(const char *name);
static int (*CreateCommand)(RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc fn,
                            const char *flags, int firstkey, int lastkey, int keystep);
static int (*IsKeysPositionRequest)(RedisModuleCtx *ctx);
static void (*KeyAtPos)(RedisModuleCtx *ctx, int pos);
static int (*WrongArity)(RedisModuleCtx *ctx);
static int (*ReplyWithLongLong)(RedisModuleCtx *ctx, long long ll);
static int (*ReplyWithError)(RedisModuleCtx *ctx, const char *err);
static int (*ReplyWithArray)(RedisModuleCtx *ctx, long len);
static const char *(*StringPtrLen)(const RedisModuleString *str, size_t *len);
static RedisModuleKey *(*OpenKey)(RedisModuleCtx *ctx, RedisModuleString *name, int mode);
static void (*CloseKey)(RedisModuleKey *key);
static int (*KeyType)(RedisModuleKey *key);
static char *(*StringDMA)(RedisModuleKey *key, size_t *len, int mode);
static int (*StringTruncate)(RedisModuleKey *key, size_t newlen);
static int (*SetAbsExpire)(RedisModuleKey *key, long long ms);
static long long (*Milliseconds)(void);
static int (*Replicate)(RedisModuleCtx *ctx, const char *cmd, const char *fmt, ...);
static int (*NotifyKeyspaceEvent)(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key);
static void (*Log)(RedisModuleCtx *ctx, const char *level, const char *fmt, ...);
static RedisModuleString *(*CreateString)(RedisModuleCtx *ctx, const char *ptr, size_t len);
static void (*FreeString)(RedisModuleCtx *ctx, RedisModuleString *str);
typedef struct RedisModuleCallReply RedisModuleCallReply;
static RedisModuleCallReply *(*Call)(RedisModuleCtx *ctx, const char *cmd, const char *fmt, ...);
static void (*FreeCallReply)(RedisModuleCallReply *reply);
static int (*CallReplyType)(RedisModuleCallReply *reply);
static const char *(*CallReplyStringPtr)(RedisModuleCallReply *reply, size_t *len);
static size_t (*ValueLength)(RedisModuleKey *key);
static int (*ZsetScore)(RedisModuleKey *key, RedisModuleString *ele, double *score);
static int (*ZsetFirstInScoreRange)(RedisModuleKey *key, double min, double max, int minex, int maxex);
static int (*ZsetLastInScoreRange)(RedisModuleKey *key, double min, double max, int minex, int maxex);
static RedisModuleString *(*ZsetRangeCurrentElement)(RedisModuleKey *key, double *score);
static int (*ZsetRangeNext)(RedisModuleKey *key);
static int (*ZsetRangePrev)(RedisModuleKey *key);
static int (*ZsetRangeEndReached)(RedisModuleKey *key);
static void (*ZsetRangeStop)(RedisModuleKey *key);

#define RM_REPLY_ERROR 1

/* api looks up the module API's functions; it fails if Redis lacks one. */
static int api(RedisModuleCtx *ctx) {
    GetApi = (int (*)(const char *, void *))(uintptr_t)((void **)ctx)[0];
#define GET(name)                                                  \
    do {                                                           \
        if (GetApi("RedisModule_" #name, (void *)&name) != RM_OK) \
            return RM_ERR;                                         \
    } while (0)
    GET(SetModuleAttribs);
    GET(CreateCommand);
    GET(IsKeysPositionRequest);
    GET(KeyAtPos);
    GET(WrongArity);
    GET(ReplyWithLongLong);
    GET(ReplyWithError);
    GET(ReplyWithArray);
    GET(StringPtrLen);
    GET(OpenKey);
    GET(CloseKey);
    GET(KeyType);
    GET(StringDMA);
    GET(StringTruncate);
    GET(SetAbsExpire);
    GET(Milliseconds);
    GET(Replicate);
    GET(NotifyKeyspaceEvent);
    GET(Log);
    GET(CreateString);
    GET(FreeString);
    GET(Call);
    GET(FreeCallReply);
    GET(CallReplyType);
    GET(CallReplyStringPtr);
    GET(ValueLength);
    GET(ZsetScore);
    GET(ZsetFirstInScoreRange);
    GET(ZsetLastInScoreRange);
    GET(ZsetRangeCurrentElement);
    GET(ZsetRangeNext);
    GET(ZsetRangePrev);
    GET(ZsetRangeEndReached);
    GET(ZsetRangeStop);
#undef GET
    /* Redis before 6.0 has no such function. */
    if (GetApi("RedisModule_IsModuleNameBusy", (void *)&IsModuleNameBusy) != RM_OK)
        IsModuleNameBusy = NULL;
    return RM_OK;
}

/* --- The decision: gcra.lua's, on 128-bit integers. --- */

typedef __int128 i128;

#define NS 1000000000LL
/* 2^63-1: the latest TAT that a key can hold. */
#define TAT_MAX ((i128)INT64_MAX)
/* An answer d*4+status is one integer while d's seconds are below this
 * (d < 2^50 ns or so), else three: -1-status, then d's seconds and
 * nanoseconds. */
#define ONE_INT_SECONDS 1125899LL

/* The most milliseconds added to every expiry (some 31 years), so that no
 * expiry passes int64. */
#define MAX_SLACK 1000000000000LL

/* The most requests a call decides: a request's argument names the first
 * request on its key in 7 bits. */
#define MAX_KEYS 127

/* parse_ll parses s (n bytes) as a decimal integer, an optional '-' then
 * 1 to 19 digits, within int64. */
static int parse_ll(const char *s, size_t n, long long *out) {
    int neg = 0;
    if (n > 0 && s[0] == '-') {
        neg = 1;
        s++;
        n--;
    }
    if (n == 0 || n > 19) return 0;
    unsigned long long v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i] - '0';
        if (c > 9) return 0;
        v = v * 10 + c;
    }
    if (v > (unsigned long long)INT64_MAX + (unsigned long long)neg) return 0;
    *out = neg ? (long long)(0 - v) : (long long)v;
    return 1;
}

static int arg_ll(RedisModuleString *s, long long *out) {
    size_t n;
    const char *p = StringPtrLen(s, &n);
    return parse_ll(p, n, out);
}

/* Why a value is not a TAT (tat.lua's bad, and the batch answer -9-bad). */
enum { BAD_NONE = 0, BAD_NUMBER = 1, BAD_RANGE = 2, BAD_TYPE = 3 };

/* parse_tat reads a value in redis-cell's format as tat.lua does: an
 * optional '+', any leading zeros, then at most 19 digits (at least one
 * digit in all) within int64; Rust's u64 parser, which redis-cell uses,
 * takes the '+' and the zeros. */
static int parse_tat(const char *s, size_t n, i128 *out) {
    size_t i = 0;
    if (n > 0 && s[0] == '+') i = 1;
    size_t digits = i;
    while (i < n && s[i] == '0') i++;
    int zeros = i > digits;
    size_t start = i;
    unsigned long long v = 0;
    for (; i < n; i++) {
        unsigned c = (unsigned char)s[i] - '0';
        if (c > 9) return BAD_NUMBER;
        if (i - start < 19) v = v * 10 + c;
    }
    size_t sig = n - start;
    if (sig == 0 && !zeros) return BAD_NUMBER;
    if (sig > 19 || v > (unsigned long long)INT64_MAX) return BAD_RANGE;
    *out = (i128)v;
    return BAD_NONE;
}

/* A limit: the cost of a request and the tolerance, in ns. */
typedef struct {
    i128 cost, tol;
} limbs;

/* read_limbs reads the four arguments from args[a]: cost's seconds and
 * nanoseconds, then the tolerance's (nanoseconds from 0 to 1e9-1). */
static int read_limbs(RedisModuleString **args, long long nargs, long long a, limbs *l) {
    long long ch, cl, vh, vl;
    if (a < 1 || a + 3 > nargs) return 0;
    if (!arg_ll(args[a], &ch) || !arg_ll(args[a + 1], &cl) || !arg_ll(args[a + 2], &vh) ||
        !arg_ll(args[a + 3], &vl))
        return 0;
    if (cl < 0 || cl >= NS || vl < 0 || vl >= NS) return 0;
    l->cost = (i128)ch * NS + cl;
    l->tol = (i128)vh * NS + vl;
    return 1;
}

/* decide is decide.lua: from now, the TAT tat (0 for an absent key) and
 * the limit, it returns the status (1 allowed, 0 refused, 2 allowed but the
 * new TAT would pass 2^63-1), sets *d to max(TAT - now, 0) and, when
 * allowed, *tat to the new TAT. */
static int decide(i128 now, i128 *tat, const limbs *l, i128 *d) {
    *d = *tat > now ? *tat - now : 0;
    if (l->cost > l->tol) return 0;
    i128 x = *d + l->cost;
    if (x > l->tol) return 0;
    if (x < 0) x = 0; /* a refund past an empty bucket leaves a full one */
    if (now + x > TAT_MAX) return 2;
    *tat = now + x;
    return 1;
}

/* answer appends to out the answer for a request (answer.lua): d*4+status
 * while d's seconds are below ONE_INT_SECONDS, else -1-status, then d's
 * seconds and nanoseconds. It returns how many integers it took. */
static int answer(long long *out, int status, i128 d) {
    /* 0 <= d <= 2^63-1: a TAT minus a time that is not negative. */
    long long d64 = (long long)d, dh = d64 / NS;
    if (dh < ONE_INT_SECONDS) {
        out[0] = d64 * 4 + status;
        return 1;
    }
    out[0] = -1 - status;
    out[1] = dh;
    out[2] = d64 % NS;
    return 3;
}

/* read_key reads the TAT of the key named name into *tat (0 if absent)
 * and sets *exists; it returns why the key holds no TAT, or BAD_NONE. A
 * value in Redis's integer encoding (as SET leaves it) is turned into a
 * plain string by reading it (the module API reads no other), its value
 * unchanged; a write by SET makes it an integer again. */
static int read_key(RedisModuleCtx *ctx, RedisModuleString *name, i128 *tat, int *exists) {
    *tat = 0;
    *exists = 0;
    RedisModuleKey *k = OpenKey(ctx, name, RM_READ);
    int type = KeyType(k);
    int bad = BAD_NONE;
    if (type == RM_KEYTYPE_STRING) {
        *exists = 1;
        size_t n;
        const char *p = StringDMA(k, &n, RM_READ);
        bad = p ? parse_tat(p, n, tat) : BAD_TYPE;
        if (bad != BAD_NONE) *tat = 0;
    } else if (type != RM_KEYTYPE_EMPTY) {
        *exists = 1;
        bad = BAD_TYPE;
    }
    CloseKey(k);
    return bad;
}

/* raw_values: keys are written in place, as plain strings ("encoding
 * raw"), rather than by SET. */
static int raw_values;

/* pxat is the word PXAT, made once. */
static RedisModuleString *pxat;

/* decimal writes v in decimal to buf (at least 20 bytes) and returns its
 * length. */
static size_t decimal(char *buf, unsigned long long v) {
    char rev[20];
    size_t n = 0;
    do {
        rev[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) buf[i] = rev[n - 1 - i];
    return n;
}

/* The state of one call's writes. */
typedef struct {
    RedisModuleCtx *ctx;
    long long base; /* Redis's clock in ms when the call started */
    long long slack;
    int checked;    /* a SET of this call passed Redis's checks */
    int wrote;      /* this call wrote a key */
    char err[256];  /* why Redis refused a write */
} writer;

/* set_flags are RM_Call's flags for a SET of w (see call_write): over
 * maxmemory, a script may write once it has written, since it cannot stop
 * half-way, and so may this call. */
static const char *set_flags(const writer *w) { return w->wrote ? "!SCEsbsb" : "!SMCEsbsb"; }

/* wrote takes the reply r of a write that w's call made through RM_Call
 * (see call_write): it returns 0 once written, or -1 with Redis's error in
 * w->err. */
static int wrote(writer *w, RedisModuleCallReply *r) {
    if (r && CallReplyType(r) != RM_REPLY_ERROR) {
        FreeCallReply(r);
        w->wrote = 1;
        return 0;
    }
    size_t len = 0;
    const char *e = r ? CallReplyStringPtr(r, &len) : NULL;
    if (!e) {
        e = "ERR funnel: Redis refused a write";
        len = strlen(e);
    }
    if (len > sizeof w->err - 1) len = sizeof w->err - 1;
    memcpy(w->err, e, len);
    w->err[len] = 0;
    if (r) FreeCallReply(r);
    return -1;
}

/* call_write runs a write command through Redis, as a script's redis.call
 * does: replicated as it is ("!"), under the checks that Redis makes of a
 * script's writes ("S": a read-only replica, too few good replicas, a
 * failed save; "M": over maxmemory, for SET until the call has written;
 * "C": the caller's ACL), with the command's own keyspace events. It
 * returns 0 once written, or -1 with Redis's error in w->err. */
static int call_write(writer *w, const char *cmd, const char *fmt, RedisModuleString *name, const char *buf,
                      size_t n, const char *at, size_t atn) {
    return wrote(w, buf ? Call(w->ctx, cmd, fmt, name, buf, n, pxat, at, atn) : Call(w->ctx, cmd, fmt, name));
}

/* store is store.lua: it writes the TAT tat, x = tat - now (>= 0) ahead of
 * now, to the key named name, which exists if exists. A TAT at now is an
 * absent key: the key is deleted. Otherwise it expires when its TAT is
 * reached, in whole milliseconds rounded up, plus slack: by SET, or with
 * "encoding raw" in place (but for a call's first SET, which passes
 * Redis's checks for the others), with SET's replication and keyspace
 * events. It returns -1 when Redis refuses the write (w->err says why), as
 * it would refuse a script's, else 0. */
static int store(writer *w, RedisModuleString *name, int exists, i128 tat, i128 x) {
    if (x == 0) return exists ? call_write(w, "DEL", "!SCEs", name, NULL, 0, NULL, 0) : 0;
    /* 0 < x <= 2^63-1: a TAT ahead of a time that is not negative. */
    long long x64 = (long long)x;
    long long ms = x64 / 1000000 + (x64 % 1000000 > 0) + w->slack;
    long long at = w->base + ms;
    char buf[24], atbuf[24];
    size_t n = decimal(buf, (unsigned long long)tat), atn = decimal(atbuf, (unsigned long long)at);
    if (!raw_values || !w->checked) {
        if (call_write(w, "SET", set_flags(w), name, buf, n, atbuf, atn) != 0) return -1;
        w->checked = 1;
        return 0;
    }
    RedisModuleKey *k = OpenKey(w->ctx, name, RM_WRITE);
    size_t len = 0;
    char *p = NULL;
    if (KeyType(k) == RM_KEYTYPE_STRING) p = StringDMA(k, &len, RM_WRITE);
    if (!p || len != n) {
        StringTruncate(k, n);
        p = StringDMA(k, &len, RM_WRITE);
    }
    memcpy(p, buf, n);
    SetAbsExpire(k, at);
    CloseKey(k);
    Replicate(w->ctx, "SET", "sbsb", name, buf, n, pxat, atbuf, atn);
    NotifyKeyspaceEvent(w->ctx, RM_NOTIFY_STRING, "set", name);
    NotifyKeyspaceEvent(w->ctx, RM_NOTIFY_GENERIC, "expire", name);
    return 0;
}

static int error(RedisModuleCtx *ctx, const char *msg) { return ReplyWithError(ctx, msg); }

/* read_now sets *now from the time arguments tv and next, as now.lua
 * does: Redis's clock when tv is "", "-" (next is then a deadline in µs of
 * Redis's clock) or "~" and the earliest time expected (next the deadline),
 * else tv and next are now's seconds and nanoseconds. It returns RM_OK, or
 * RM_ERR once it has answered the error: a call past its deadline or
 * before its earliest time changes nothing. */
static int read_now(RedisModuleCtx *ctx, RedisModuleString *tvs, RedisModuleString *next, i128 *now) {
    size_t tn;
    const char *tv = StringPtrLen(tvs, &tn);
    if (tn == 0 || (tn == 1 && tv[0] == '-') || tv[0] == '~') {
        struct timeval t;
        gettimeofday(&t, NULL);
        long long at = (long long)t.tv_sec * 1000000 + t.tv_usec;
        *now = (i128)at * 1000;
        if (tn > 0) {
            long long deadline, earliest;
            if (!arg_ll(next, &deadline)) {
                error(ctx, "ERR funnel: the deadline must be an integer");
                return RM_ERR;
            }
            if (at > deadline) {
                error(ctx, "DEADLINE funnel: the command started after its deadline; nothing was changed");
                return RM_ERR;
            }
            if (tv[0] == '~') {
                if (!parse_ll(tv + 1, tn - 1, &earliest)) {
                    error(ctx, "ERR funnel: the earliest time must be an integer");
                    return RM_ERR;
                }
                if (at < earliest) {
                    error(ctx, "CLOCKSTEP funnel: Redis's time is before the earliest this call expects; "
                               "nothing was changed");
                    return RM_ERR;
                }
            }
        }
        return RM_OK;
    }
    long long h, l;
    if (!parse_ll(tv, tn, &h) || !arg_ll(next, &l) || h < 0 || l < 0 || l >= NS) {
        error(ctx, "ERR funnel: now must be seconds and nanoseconds, integers");
        return RM_ERR;
    }
    *now = (i128)h * NS + l;
    return RM_OK;
}

/* VERSION_ERROR is the error of a call whose version this module does not
 * speak, for the command cmd. */
#define VERSION_ERROR(cmd)                                                                     \
    "ERR funnel: version of " cmd "'s arguments unknown to this module, which speaks version " \
    FUNNEL_VERSION "; load the module of the caller's release"

/* head reads what every command of this module starts with: version
 * numkeys key..., and answers COMMAND GETKEYS's question (the keys are args
 * 3 to 3+numkeys-1). It returns 1 with *nk set when the call goes on, or 0
 * when it has answered (verr is the error of another version). */
static int head(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, const char *verr, long long *nk) {
    if (IsKeysPositionRequest(ctx)) {
        if (argc >= 3 && arg_ll(argv[2], nk) && *nk >= 1 && *nk <= argc - 3)
            for (int i = 0; i < *nk; i++) KeyAtPos(ctx, 3 + i);
        return 0;
    }
    if (argc < 3) {
        WrongArity(ctx);
        return 0;
    }
    size_t vn;
    const char *ver = StringPtrLen(argv[1], &vn);
    if (vn != sizeof FUNNEL_VERSION - 1 || memcmp(ver, FUNNEL_VERSION, vn) != 0) {
        error(ctx, verr);
        return 0;
    }
    if (!arg_ll(argv[2], nk) || *nk < 1 || *nk > MAX_KEYS) {
        error(ctx, "ERR funnel: the number of keys must be an integer from 1 to 127");
        return 0;
    }
    if (*nk > argc - 3) {
        error(ctx, "ERR funnel: fewer keys than the number of keys says");
        return 0;
    }
    return 1;
}

/* A request of a "t" batch, decoded from its argument a*256 + l*128 + f. */
typedef struct {
    int f;    /* the first request on its key (from 1), 0 if it comes once */
    int last; /* the last request on a key that comes more than once */
    int lim;  /* the index of its limit in lims */
} request;

/* FUNNEL.GCRA version numkeys key... arg... */
static int GcraCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long nk;
    if (!head(ctx, argv, argc, VERSION_ERROR("FUNNEL.GCRA"), &nk)) return RM_OK;
    RedisModuleString **keys = argv + 3;
    /* args[1..nargs] are gcra.lua's ARGV. */
    RedisModuleString **args = argv + 2 + nk;
    long long nargs = argc - 3 - nk;
    if (nargs < 4) return WrongArity(ctx);

    size_t on;
    const char *op = StringPtrLen(args[1], &on);
    int uniform = on == 1 && op[0] == 'u';
    if (!uniform && !(on == 1 && op[0] == 't'))
        return error(ctx, "ERR funnel: the first argument must be t or u");
    long long slack;
    if (!arg_ll(args[4], &slack) || slack < 0 || slack > MAX_SLACK)
        return error(ctx, "ERR funnel: the expiries' slack must be an integer from 0 to 1000000000000 (ms)");

    /* The requests and their limits, all read before the time is. */
    limbs lims[MAX_KEYS];
    request reqs[MAX_KEYS];
    int nlim = 0;
    if (uniform) {
        if (!read_limbs(args, nargs, 5, &lims[0]))
            return error(ctx, "ERR funnel: a u call's limit is args 5 to 8, integers");
        nlim = 1;
        for (int i = 0; i < nk; i++) reqs[i] = (request){0, 0, 0};
    } else if (nk == 1) {
        long long m;
        if (nargs < 5 || !arg_ll(args[5], &m) || m <= 0 || m % 256 != 0 ||
            !read_limbs(args, nargs, m / 256, &lims[0]))
            return error(ctx, "ERR funnel: a request's argument must name its limit's four integers");
        nlim = 1;
        reqs[0] = (request){0, 0, 0};
    } else {
        if (nargs < 4 + nk) return WrongArity(ctx);
        long long prev = -1; /* the index of the last limit read */
        for (int i = 1; i <= nk; i++) {
            size_t mn;
            const char *ms = StringPtrLen(args[4 + i], &mn);
            int f = 0, last = 0;
            if (mn > 0) {
                long long m;
                if (!parse_ll(ms, mn, &m) || m < 0)
                    return error(ctx, "ERR funnel: a request's argument must be empty or a non-negative integer");
                f = (int)(m % 128);
                m /= 128;
                last = (int)(m % 2);
                long long a = m / 2;
                if (a > 0 && a != prev) {
                    if (a <= 4 + nk || !read_limbs(args, nargs, a, &lims[nlim]))
                        return error(ctx, "ERR funnel: a request's argument must name its limit's four integers");
                    prev = a;
                    nlim++;
                }
            }
            if (nlim == 0) return error(ctx, "ERR funnel: the first request must name its limit");
            if (f > i || (f > 0 && f < i && reqs[f - 1].f != f) || (last && (f == 0 || f == i)))
                return error(ctx, "ERR funnel: a request's argument names its key's first request wrongly");
            reqs[i - 1] = (request){f, last, nlim - 1};
        }
    }

    /* Now: Redis's clock, or the caller's. */
    i128 now;
    if (read_now(ctx, args[2], args[3], &now) != RM_OK) return RM_OK;

    writer w = {.ctx = ctx, .base = Milliseconds(), .slack = slack};

    /* The requests are decided first, then the keys written, then the
     * answers given: a write that Redis refuses (as it would refuse the
     * script's first) answers its error, as the script would. */
    long long ans[3 * MAX_KEYS];
    int na = 0;
    if (nk == 1) {
        i128 tat, d;
        int exists;
        int bad = read_key(ctx, keys[0], &tat, &exists);
        if (bad == BAD_TYPE) return error(ctx, "WRONGTYPE the value is not a string");
        if (bad == BAD_NUMBER) return error(ctx, "WRONGTYPE the value is not a decimal number");
        if (bad == BAD_RANGE) return error(ctx, "WRONGTYPE the value is beyond int64 nanoseconds");
        int status = decide(now, &tat, &lims[0], &d);
        if (status == 1 && store(&w, keys[0], exists, tat, tat - now) != 0) return error(ctx, w.err);
        if (answer(ans, status, d) == 1) return ReplyWithLongLong(ctx, ans[0]);
        ReplyWithArray(ctx, 3);
        for (int j = 0; j < 3; j++) ReplyWithLongLong(ctx, ans[j]);
        return RM_OK;
    }

    /* A batch: each request in turn. A key that comes more than once keeps
     * its state at the index of its first request, and is written once,
     * after its last request, if one changed it. */
    i128 tats[MAX_KEYS];
    int bads[MAX_KEYS], exist[MAX_KEYS], changed[MAX_KEYS];
    struct {
        int i, exists;
        i128 tat;
    } writes[MAX_KEYS];
    int nw = 0;
    for (int i = 1; i <= nk; i++) {
        request *r = &reqs[i - 1];
        int f = r->f;
        i128 tat, d;
        int bad, exists;
        if (f == 0 || f == i) {
            bad = read_key(ctx, keys[i - 1], &tat, &exists);
            if (f == i) {
                tats[f - 1] = tat;
                bads[f - 1] = bad;
                exist[f - 1] = exists;
                changed[f - 1] = 0;
            }
        } else {
            tat = tats[f - 1];
            bad = bads[f - 1];
            exists = exist[f - 1];
        }
        if (bad != BAD_NONE) {
            ans[na++] = -9 - bad;
            continue;
        }
        int status = decide(now, &tat, &lims[r->lim], &d);
        if (f > 0 && status == 1) {
            tats[f - 1] = tat;
            changed[f - 1] = 1;
        }
        na += answer(ans + na, status, d);
        if ((f == 0 && status == 1) || (r->last && changed[f - 1])) {
            writes[nw].i = i - 1;
            writes[nw].exists = exists;
            writes[nw].tat = f == 0 ? tat : tats[f - 1];
            nw++;
        }
    }
    for (int j = 0; j < nw; j++)
        if (store(&w, keys[writes[j].i], writes[j].exists, writes[j].tat, writes[j].tat - now) != 0)
            return error(ctx, w.err);
    ReplyWithArray(ctx, na);
    for (int j = 0; j < na; j++) ReplyWithLongLong(ctx, ans[j]);
    return RM_OK;
}

/* --- Several limits at once: takes.lua, on doubles as Lua computes. --- */

/* 2^53: takes.lua's numbers are below it (Go bounds them), where a double
 * holds every integer. */
#define EXACT (1LL << 53)

/* lfloor is floor(a), but for the sign of a zero (which no result here
 * shows): a double of magnitude 2^52 or more is integral already. */
static double lfloor(double a) {
    if (!(a > -4503599627370496.0 && a < 4503599627370496.0)) return a;
    double t = (double)(long long)a;
    return t > a ? t - 1 : t;
}

/* lmod is Lua 5.1's a % b: a - floor(a/b)*b. */
static double lmod(double a, double b) { return a - lfloor(a / b) * b; }

/* number is Lua's tonumber of a run of n decimal digits (strtod's, correctly
 * rounded; infinite past a double's range). */
static double number(const char *p, size_t n) {
    while (n > 1 && *p == '0') {
        p++;
        n--;
    }
    if (n > 400) return 1.0 / 0.0;
    char buf[401];
    memcpy(buf, p, n);
    buf[n] = 0;
    return strtod(buf, NULL);
}

/* fields reads raw (n bytes) as Lua's match of '^T(%d+):(%d+)...$' with k
 * runs of digits after the tag T, into v; it returns 0 when raw does not
 * match. */
static int fields(const char *raw, size_t n, char tag, int k, double *v) {
    if (n < 1 || raw[0] != tag) return 0;
    size_t i = 1;
    for (int f = 0; f < k; f++) {
        size_t start = i;
        while (i < n && raw[i] >= '0' && raw[i] <= '9') i++;
        if (i == start) return 0;
        v[f] = number(raw + start, i - start);
        if (f < k - 1) {
            if (i >= n || raw[i] != ':') return 0;
            i++;
        }
    }
    return i == n;
}

/* A take of FUNNEL.TAKES: its arguments, then what it found and decided. */
typedef struct {
    char alg;      /* g l (a funnel, a delaying bucket), f d (a fixed
                    * window, of a period or a calendar's), s (a sliding
                    * window counter) */
    double q;      /* the quantity */
    limbs lim;     /* g l: the cost and the tolerance */
    double count;  /* f d s */
    double p;      /* s f: the period in ms */
    double s, e;   /* d: the window's start and end in ms; s f: computed */
    int exists;    /* the key held a value */
    int st;        /* 1 admitted, 0 refused, 2 a TAT beyond int64 */
    i128 tat, x;   /* g l: the TAT to write, x = tat - now */
    double prev;   /* s: the previous window's units */
    double units;  /* f d s: the units to write in the current window */
} take;

/* arg_exact reads args[a] as an integer from lo to EXACT-1 (lo at least
 * 1-EXACT). */
static int arg_exact(RedisModuleString **args, long long a, long long lo, double *out) {
    long long v;
    if (!arg_ll(args[a], &v) || v < lo || v >= EXACT) return 0;
    *out = (double)v;
    return 1;
}

/* read_fixed is fixedread.lua: it reads the fixed window raw (NULL when
 * absent; n bytes) into *units, the units it counts in the window that
 * starts at s (0 when raw is another window's), or returns 0 when raw is
 * not a fixed window's state. */
static int read_fixed(const char *raw, size_t n, double s, double nowms, double *units) {
    double v[3];
    *units = 0;
    if (!raw) return 1;
    if (!fields(raw, n, 'F', 3, v)) return 0;
    /* (or a later window's: the clock was stepped back) */
    if (v[1] > nowms && v[0] >= s) *units = v[2];
    return 1;
}

/* read_sliding is slidingread.lua: it reads the sliding window counter raw
 * (NULL when absent; n bytes) of period p into *prev and *cur, the previous
 * and current windows' counts at nowms in the window that starts at s, or
 * returns 0 when raw is not a sliding window's state. */
static int read_sliding(const char *raw, size_t n, double s, double p, double nowms, double *prev, double *cur) {
    double v[4];
    *prev = *cur = 0;
    if (!raw) return 1;
    if (!fields(raw, n, 'S', 4, v)) return 0;
    double at = 0;
    if (v[3] > 0)
        at = v[0] + 2 * v[1];
    else if (v[2] > 0)
        at = v[0] + v[1];
    if (at > nowms) {
        if (v[0] >= s) {
            *prev = v[2];
            *cur = v[3];
        } else if (v[0] == s - p) {
            *prev = v[3];
        }
    }
    return 1;
}

/* sliding_admits reports whether a sliding window counter of period p and
 * count that holds prev and cur in the window that starts at s admits q
 * units at nowms: cur + ceil(prev·(p−el)/p) + q <= count, el the time into
 * the window (below 2^53, as Go bounds (count+1)·p). */
static int sliding_admits(double prev, double cur, double q, double count, double p, double s, double nowms) {
    double el = nowms - s;
    double x = prev * (p - el) + p - 1;
    return cur + (x - lmod(x, p)) / p + q <= count;
}

/* decide_take reads the state of t's key k (type is its type) and decides
 * t at now (nowms in ms), appending its answer to out (takes.lua's: how
 * many integers it took), or returns -1 when the key holds no state of
 * t's kind or, for a calendar's window, the window does not hold now. */
static int decide_take(RedisModuleKey *k, int type, take *t, i128 now, double nowms, long long *out) {
    const char *raw = NULL;
    size_t n = 0;
    if (type == RM_KEYTYPE_STRING) {
        raw = StringDMA(k, &n, RM_READ);
        if (!raw) return -1;
        t->exists = 1;
    } else if (type != RM_KEYTYPE_EMPTY) {
        return -1;
    }
    if (t->alg == 'g' || t->alg == 'l') {
        i128 tat = 0, d;
        if (raw && parse_tat(raw, n, &tat) != BAD_NONE) return -1;
        t->st = decide(now, &tat, &t->lim, &d);
        t->tat = tat;
        t->x = tat - now;
        return answer(out, t->st, d);
    }
    if (t->alg == 's') {
        double prev, cur;
        t->s = nowms - lmod(nowms, t->p);
        if (!read_sliding(raw, n, t->s, t->p, nowms, &prev, &cur)) return -1;
        t->st = sliding_admits(prev, cur, t->q, t->count, t->p, t->s, nowms);
        t->prev = prev;
        t->units = cur + t->q;
        out[0] = (long long)(cur * 4 + t->st);
        out[1] = (long long)prev;
        return 2;
    }
    if (t->alg == 'f') {
        t->s = nowms - lmod(nowms, t->p);
        t->e = t->s + t->p;
    } else if (nowms < t->s || nowms >= t->e) {
        return -1;
    }
    double units;
    if (!read_fixed(raw, n, t->s, nowms, &units)) return -1;
    t->st = units + t->q <= t->count;
    t->units = units + t->q;
    out[0] = (long long)(units * 4 + t->st);
    return 1;
}

/* write_window writes a window's state value (len bytes) to the key named
 * name, to expire ms (a double, as the scripts format it) from the call's
 * start, by SET as PSETEX would (see call_write). */
static int write_window(writer *w, RedisModuleString *name, const char *value, size_t len, double ms) {
    char atbuf[24];
    size_t atn = (size_t)snprintf(atbuf, sizeof atbuf, "%lld", w->base + (long long)ms);
    if (call_write(w, "SET", set_flags(w), name, value, len, atbuf, atn) != 0) return -1;
    w->checked = 1;
    return 0;
}

/* write_fixed writes the fixed window from s to e (ms) that holds units to
 * the key named name, to expire at its end plus the slack, as window.lua
 * and takes.lua write it. */
static int write_fixed(writer *w, RedisModuleString *name, double s, double e, double units, double nowms) {
    char v[128];
    int n = snprintf(v, sizeof v, "F%lld:%lld:%lld", (long long)s, (long long)e, (long long)units);
    return write_window(w, name, v, (size_t)n, e - nowms + (double)w->slack);
}

/* write_sliding writes the sliding window counter of period p whose window
 * starts at s and holds prev and cur to the key named name, to expire when
 * its current window has left the next one plus the slack, as window.lua
 * and takes.lua write it. */
static int write_sliding(writer *w, RedisModuleString *name, double s, double p, double prev, double cur, double nowms) {
    char v[128];
    int n = snprintf(v, sizeof v, "S%lld:%lld:%lld:%lld", (long long)s, (long long)p, (long long)prev, (long long)cur);
    return write_window(w, name, v, (size_t)n, s + 2 * p - nowms + (double)w->slack);
}

/* A call of a command whose ARGV start with now's two arguments and the
 * expiries' slack (takes.lua's, window.lua's). */
typedef struct {
    long long nk;               /* the number of keys */
    RedisModuleString **keys;   /* the keys */
    RedisModuleString **args;   /* args[1..nargs] are the script's ARGV */
    long long nargs;
    long long slack;
} timed_call;

/* timed_head is head for such a command; it also reads the slack. */
static int timed_head(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, const char *verr, timed_call *c) {
    if (!head(ctx, argv, argc, verr, &c->nk)) return 0;
    c->keys = argv + 3;
    c->args = argv + 2 + c->nk;
    c->nargs = argc - 3 - c->nk;
    if (c->nargs < 3) {
        WrongArity(ctx);
        return 0;
    }
    if (!arg_ll(c->args[3], &c->slack) || c->slack < 0 || c->slack > MAX_SLACK) {
        error(ctx, "ERR funnel: the expiries' slack must be an integer from 0 to 1000000000000 (ms)");
        return 0;
    }
    return 1;
}

/* FUNNEL.TAKES version numkeys key... arg... */
static int TakesCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    timed_call call;
    if (!timed_head(ctx, argv, argc, VERSION_ERROR("FUNNEL.TAKES"), &call)) return RM_OK;
    long long nk = call.nk, nargs = call.nargs, slack = call.slack;
    RedisModuleString **keys = call.keys, **args = call.args;

    /* The takes, all read before the time is. */
    take takes[MAX_KEYS];
    long long a = 4;
    for (int i = 0; i < nk; i++) {
        take *t = &takes[i];
        memset(t, 0, sizeof *t);
        if (a + 3 > nargs) return error(ctx, "ERR funnel: fewer arguments than the takes need");
        size_t an;
        const char *alg = StringPtrLen(args[a], &an);
        t->alg = an == 1 ? alg[0] : 0;
        if (!arg_exact(args, a + 1, 0, &t->q))
            return error(ctx, "ERR funnel: a take's quantity must be an integer from 0 to 2^53-1");
        switch (t->alg) {
        case 'g':
        case 'l': {
            double c, v;
            if (!arg_exact(args, a + 2, 0, &c) || !arg_exact(args, a + 3, 0, &v))
                return error(ctx, "ERR funnel: a funnel's cost and tolerance must be integers from 0 to 2^53-1 (ns)");
            t->lim.cost = (i128)c;
            t->lim.tol = (i128)v;
            a += 4;
            break;
        }
        case 'f':
        case 's':
            if (!arg_exact(args, a + 2, 0, &t->count) || !arg_exact(args, a + 3, 1, &t->p))
                return error(ctx, "ERR funnel: a window's count and period must be integers below 2^53, the period above 0");
            a += 4;
            break;
        case 'd':
            /* (a window in a zone east of UTC may start before 1970) */
            if (a + 4 > nargs || !arg_exact(args, a + 2, 0, &t->count) || !arg_exact(args, a + 3, 1 - EXACT, &t->s) ||
                !arg_exact(args, a + 4, 1 - EXACT, &t->e))
                return error(ctx, "ERR funnel: a calendar window's count must be an integer from 0 to 2^53-1, its "
                                  "start and end integers of magnitude below 2^53");
            a += 5;
            break;
        default:
            return error(ctx, "ERR funnel: a take's algorithm must be g, l, f, d or s");
        }
    }
    if (a != nargs + 1) return error(ctx, "ERR funnel: more arguments than the takes need");

    i128 now;
    if (read_now(ctx, args[1], args[2], &now) != RM_OK) return RM_OK;
    long long nh = (long long)(now / NS), nl = (long long)(now % NS);
    /* in doubles, as Lua computes it (an injected clock's seconds may pass
     * what int64 milliseconds hold) */
    double nowms = (double)nh * 1000 + (double)(nl / 1000000);

    /* Each take decided in turn; when all are admitted, those of a
     * quantity above 0 are written, else none. */
    long long ans[2 + 3 * MAX_KEYS];
    int na = 2, all = 1;
    ans[0] = nh;
    ans[1] = nl;
    for (int i = 0; i < nk; i++) {
        RedisModuleKey *k = OpenKey(ctx, keys[i], RM_READ);
        int got = decide_take(k, KeyType(k), &takes[i], now, nowms, ans + na);
        CloseKey(k);
        if (got < 0) {
            ReplyWithArray(ctx, 3);
            ReplyWithLongLong(ctx, nh);
            ReplyWithLongLong(ctx, nl);
            return ReplyWithLongLong(ctx, -1);
        }
        na += got;
        if (takes[i].st != 1) all = 0;
    }
    if (all) {
        writer w = {.ctx = ctx, .base = Milliseconds(), .slack = slack};
        for (int i = 0; i < nk; i++) {
            take *t = &takes[i];
            if (t->q <= 0) continue;
            int r;
            if (t->alg == 'g' || t->alg == 'l')
                r = store(&w, keys[i], t->exists, t->tat, t->x);
            else if (t->alg == 's')
                r = write_sliding(&w, keys[i], t->s, t->p, t->prev, t->units, nowms);
            else
                r = write_fixed(&w, keys[i], t->s, t->e, t->units, nowms);
            if (r != 0) return error(ctx, w.err);
        }
    }
    ReplyWithArray(ctx, na);
    for (int j = 0; j < na; j++) ReplyWithLongLong(ctx, ans[j]);
    return RM_OK;
}

/* --- One window, or a batch of them: window.lua. --- */

/* The most units a window's answer n*4+status carries: 2^50. */
#define MAX_UNITS 1125899906842624.0

/* FUNNEL.WINDOW version numkeys key... arg...: window.lua, on doubles as
 * Lua computes it. Each request is decided, and written, in turn: a key
 * that comes more than once reads what the requests before it wrote. */
static int WindowCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    timed_call call;
    if (!timed_head(ctx, argv, argc, VERSION_ERROR("FUNNEL.WINDOW"), &call)) return RM_OK;
    long long nk = call.nk, nargs = call.nargs, slack = call.slack;
    RedisModuleString **keys = call.keys, **args = call.args;
    if (nargs != 3 + 3 * nk) return error(ctx, "ERR funnel: a window call takes three arguments a request");
    struct {
        double q, count, p;
        int fixed;
    } reqs[MAX_KEYS];
    for (int i = 0; i < nk; i++) {
        long long a = 4 + 3 * (long long)i, p;
        if (!arg_exact(args, a, 0, &reqs[i].q) || !arg_exact(args, a + 1, 0, &reqs[i].count) ||
            !arg_ll(args[a + 2], &p) || p == 0 || p <= -EXACT || p >= EXACT)
            return error(ctx, "ERR funnel: a window request's quantity and count must be integers from 0 to "
                              "2^53-1, its period one of magnitude from 1 to 2^53-1");
        reqs[i].fixed = p > 0;
        reqs[i].p = (double)(p > 0 ? p : -p);
    }

    i128 now;
    if (read_now(ctx, args[1], args[2], &now) != RM_OK) return RM_OK;
    long long nh = (long long)(now / NS), nl = (long long)(now % NS);
    double nowms = (double)nh * 1000 + (double)(nl / 1000000);

    writer w = {.ctx = ctx, .base = Milliseconds(), .slack = slack};
    long long ans[2 + 2 * MAX_KEYS];
    ans[0] = nh;
    ans[1] = nl;
    int lone_fixed = 1; /* a lone request's reply leaves prev out */
    for (int i = 0; i < nk; i++) {
        double q = reqs[i].q, count = reqs[i].count, p = reqs[i].p, code = -1, prev = 0;
        int fixed = 1;
        char write = 0;                 /* 'F' or 'S': the state to write */
        double ws = 0, we = 0, wn = 0;  /* its start, end or period, units */
        RedisModuleKey *k = OpenKey(ctx, keys[i], RM_READ);
        int type = KeyType(k);
        const char *raw = NULL;
        size_t n = 0;
        if (type == RM_KEYTYPE_STRING) raw = StringDMA(k, &n, RM_READ);
        if (type == RM_KEYTYPE_EMPTY || raw) {
            fixed = reqs[i].fixed;
            double s0 = nowms - lmod(nowms, p);
            if (fixed) {
                double e = s0 + p, units;
                if (read_fixed(raw, n, s0, nowms, &units) && units < MAX_UNITS) {
                    code = units * 4;
                    if (units + q <= count) {
                        code = code + 1;
                        if (q > 0) write = 'F', ws = s0, we = e, wn = units + q;
                    }
                }
            } else {
                double cur;
                if (read_sliding(raw, n, s0, p, nowms, &prev, &cur) && cur < MAX_UNITS) {
                    code = cur * 4;
                    if (sliding_admits(prev, cur, q, count, p, s0, nowms)) {
                        code = code + 1;
                        if (q > 0) write = 'S', ws = s0, we = p, wn = cur + q;
                    }
                } else {
                    prev = 0;
                }
            }
        }
        CloseKey(k);
        if ((write == 'F' && write_fixed(&w, keys[i], ws, we, wn, nowms) != 0) ||
            (write == 'S' && write_sliding(&w, keys[i], ws, we, prev, wn, nowms) != 0))
            return error(ctx, w.err);
        ans[2 + 2 * i] = (long long)code;
        ans[3 + 2 * i] = (long long)prev;
        lone_fixed = fixed;
    }
    int na = nk == 1 && lone_fixed ? 3 : 2 + 2 * (int)nk;
    ReplyWithArray(ctx, na);
    for (int j = 0; j < na; j++) ReplyWithLongLong(ctx, ans[j]);
    return RM_OK;
}

/* --- A concurrency limit's acquire or release: conc.lua. --- */

/* The most leases that a call reads whole (conc.lua's CONCREAD, which the
 * store sets to 16; a larger key is read a number at a time). */
#define MAX_CONCREAD 1024

/* marker is the member "\0conc" that holds a concurrency key's unit delay
 * (its score is -1 - the delay), made once. */
static RedisModuleString *marker;

/* same reports whether the strings a and b hold the same bytes. */
static int same(RedisModuleString *a, RedisModuleString *b) {
    size_t an, bn;
    const char *ap = StringPtrLen(a, &an), *bp = StringPtrLen(b, &bn);
    return an == bn && memcmp(ap, bp, an) == 0;
}

/* lua_d is Lua 5.1's string.format('%d', x) (a C cast), into buf (at least
 * 24 bytes). */
static const char *lua_d(char *buf, double x) {
    snprintf(buf, 24, "%lld", (long long)x);
    return buf;
}

/* zcount is ZCOUNT k lo hi on the sorted set k. */
static double zcount(RedisModuleKey *k, double lo, double hi) {
    double n = 0;
    if (ZsetFirstInScoreRange(k, lo, hi, 0, 0) == RM_OK)
        while (!ZsetRangeEndReached(k)) {
            n++;
            if (!ZsetRangeNext(k)) break;
        }
    ZsetRangeStop(k);
    return n;
}

/* zscore_at is the score of ZRANGE k i i WITHSCORES (i from the start when
 * not negative, -1 the last) on the sorted set k, which has that element. */
static double zscore_at(RedisModuleCtx *ctx, RedisModuleKey *k, long long i) {
    double s = 0;
    int ok = i >= 0 ? ZsetFirstInScoreRange(k, -1.0 / 0.0, 1.0 / 0.0, 0, 0) : ZsetLastInScoreRange(k, -1.0 / 0.0, 1.0 / 0.0, 0, 0);
    if (ok == RM_OK) {
        for (long long j = i >= 0 ? i : -1 - i; j > 0; j--)
            if (!(i >= 0 ? ZsetRangeNext(k) : ZsetRangePrev(k))) break;
        RedisModuleString *e = ZsetRangeCurrentElement(k, &s);
        if (e) FreeString(ctx, e);
    }
    ZsetRangeStop(k);
    return s;
}

/* WRITE runs a write of a concurrency call through Redis, as call_write
 * does: over maxmemory only its first write is checked, as a script's. */
#define WRITE(w, cmd, spec, ...) wrote((w), Call((w)->ctx, cmd, (w)->wrote ? "!SCE" spec : "!SMCE" spec, __VA_ARGS__))

/* FUNNEL.CONC version 1 key arg...: conc.lua, on doubles as Lua computes
 * it, with the same reads (the key's first leases, or for a larger key
 * the numbers it needs) and the same writes, through Redis (ZREMRANGEBYSCORE,
 * ZADD, PEXPIRE, ZREM, DEL). */
static int ConcCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long nk;
    if (!head(ctx, argv, argc, VERSION_ERROR("FUNNEL.CONC"), &nk)) return RM_OK;
    if (nk != 1) return error(ctx, "ERR funnel: a concurrency call takes one key");
    RedisModuleString *key = argv[3], **args = argv + 3; /* args[1..] are ARGV */
    long long nargs = argc - 4, slack0;
    if (nargs != 7 && nargs != 8) return error(ctx, "ERR funnel: a concurrency call takes seven or eight arguments");
    if (!arg_ll(args[3], &slack0) || slack0 < 0 || slack0 >= EXACT)
        return error(ctx, "ERR funnel: the expiries' slack must be an integer from 0 to 2^53-1");
    long long slack = slack0 % 10000000, concread = slack0 / 10000000000LL;
    if (concread > MAX_CONCREAD) return error(ctx, "ERR funnel: a concurrency call reads at most 1024 leases whole");
    size_t qn;
    const char *qs = StringPtrLen(args[4], &qn);
    int take = !(qn == 1 && qs[0] == 'r');
    double q = 0, count = 0, period = 0, lat = -1, d;
    if (take && !arg_exact(args, 4, 0, &q))
        return error(ctx, "ERR funnel: an acquire's quantity must be an integer from 0 to 2^53-1 (r: a release)");
    /* (a release reads neither: Go sends a release with no limit) */
    if (take && (!arg_exact(args, 5, 1, &count) || !arg_exact(args, 6, 1, &period)))
        return error(ctx, "ERR funnel: an acquire's count and period must be integers from 1 to 2^53-1");
    RedisModuleString *id = args[7], *def = NULL;
    size_t idn;
    const char *ids = StringPtrLen(id, &idn);
    if (idn > 0 && ids[0] == 0) return error(ctx, "ERR funnel: a lease id must not start with a NUL byte");
    if (nargs == 8) {
        size_t dn;
        StringPtrLen(args[8], &dn);
        if (take && dn > 0 && !arg_exact(args, 8, 1 - EXACT, &d))
            return error(ctx, "ERR funnel: an acquire's default unit delay must be empty or an integer score");
        if (!take && !arg_exact(args, 8, 1 - EXACT, &lat))
            return error(ctx, "ERR funnel: a release's latency must be an integer (ns)");
        if (take) {
            if (dn > 0) def = args[8];
            lat = 0;
        }
    }

    i128 now;
    if (read_now(ctx, args[1], args[2], &now) != RM_OK) return RM_OK;
    long long nh = (long long)(now / NS), nl = (long long)(now % NS);
    double nowms = (double)nh * 1000 + (double)(nl / 1000000);
    double us = (double)nh * 1000000 + (double)(nl / 1000);

    /* The marker and up to concread leases, and one more to tell whether
     * there are more: their scores, and which one is id's. */
    RedisModuleKey *k = OpenKey(ctx, key, RM_READ);
    int type = KeyType(k), nm = 0, marked = 0, own_i = -1;
    double sc[MAX_CONCREAD + 2];
    if (type == RM_KEYTYPE_ZSET) {
        if (ZsetFirstInScoreRange(k, -1.0 / 0.0, 1.0 / 0.0, 0, 0) == RM_OK)
            while (nm < concread + 2 && !ZsetRangeEndReached(k)) {
                RedisModuleString *e = ZsetRangeCurrentElement(k, &sc[nm]);
                if (!e) break;
                if (nm == 0)
                    marked = same(e, marker);
                else if (own_i < 0 && same(e, id))
                    own_i = nm;
                FreeString(ctx, e);
                nm++;
                if (!ZsetRangeNext(k)) break;
            }
        ZsetRangeStop(k);
    }
    int whole = nm <= concread + 1, exists = nm > 0, has_own = 0;
    double last = -1, prev = -1, own = 0, old = 0;
    if ((type != RM_KEYTYPE_EMPTY && type != RM_KEYTYPE_ZSET) || (exists && !marked)) goto other;
    if (whole) {
        for (int i = 1; i < nm; i++) {
            if (sc[i] <= nowms) old++;
            if (i == own_i) own = sc[i], has_own = 1;
            prev = last, last = sc[i];
        }
    } else {
        double s = zscore_at(ctx, k, -1);
        if (s >= 0) last = s;
    }
    /* leases that have all expired go to family.lua */
    if (exists && !(last > nowms)) goto other;

    double n = 0, wait = -1, others = -1, unit = 0, mark = 0;
    int held = 0;
    if (exists && whole) {
        n = nm - 1 - old;
        mark = sc[0];
        others = last;
        if (has_own && own == last) {
            others = -1;
            if (prev > nowms) others = prev;
        }
    } else if (exists) {
        old = zcount(k, 0, (double)(long long)nowms);
        n = (double)ValueLength(k) - 1 - old;
        ZsetScore(k, marker, &mark);
        has_own = ZsetScore(k, id, &own) == RM_OK;
        others = last;
        if (has_own && own == last) {
            others = -1;
            double s = zscore_at(ctx, k, -2);
            if (s > nowms) others = s;
        }
    }
    if (exists && take && lat >= 0) unit = -1 - mark;
    if (has_own && own > nowms) held = 1;
    double status = 1;
    int acquire = 0;
    if (take) {
        if (q > 1) {
            status = 0;
        } else if (q == 1 && !held && n >= count) {
            /* the expiry that leaves room for one: the (n-count+1)-th live
             * lease's, at rank old+n-count+1 after the marker */
            status = 0;
            long long at = (long long)(old + n - count + 1);
            wait = whole ? sc[at] : zscore_at(ctx, k, at);
        } else if (q == 1) {
            acquire = 1;
        }
    }
    CloseKey(k);
    k = NULL;

    writer w = {.ctx = ctx};
    char b1[24], b2[24];
    int bad = 0;
    if (acquire) {
        if (old > 0) bad = WRITE(&w, "ZREMRANGEBYSCORE", "scc", key, "0", lua_d(b1, nowms));
        double at = nowms + period;
        lua_d(b2, at);
        /* a key takes the default unit delay when it has none */
        if (!bad && unit == 0 && (def || !exists)) {
            if (def)
                bad = WRITE(&w, "ZADD", "ssscs", key, def, marker, b2, id);
            else
                bad = WRITE(&w, "ZADD", "scscs", key, "-1", marker, b2, id);
        } else if (!bad) {
            bad = WRITE(&w, "ZADD", "scs", key, b2, id);
        }
        /* the key lasts as long as its latest lease: this one, for its
         * period (ARGV[6], as Go wrote it), or another */
        if (!bad && others > at)
            bad = WRITE(&w, "PEXPIRE", "sc", key, lua_d(b1, others - nowms + (double)slack));
        else if (!bad && slack == 0)
            bad = WRITE(&w, "PEXPIRE", "ss", key, args[6]);
        else if (!bad)
            bad = WRITE(&w, "PEXPIRE", "sc", key, lua_d(b1, period + (double)slack));
    } else if (!take) {
        status = held;
        if (held) n = n - 1;
        if (held && n <= 0) {
            bad = WRITE(&w, "DEL", "s", key);
            last = -1;
        } else {
            /* (a latency reported for a lease not held is an error, which
             * changes nothing) */
            if (old > 0 && (held || lat <= 0)) bad = WRITE(&w, "ZREMRANGEBYSCORE", "scc", key, "0", lua_d(b1, nowms));
            if (!bad && held) {
                bad = WRITE(&w, "ZREM", "ss", key, id);
                if (!bad && lat > 0) {
                    double sum = -1 - mark + lat;
                    unit = (sum - lmod(sum, 2)) / 2;
                    if (unit < 1) unit = 1;
                    bad = WRITE(&w, "ZADD", "scs", key, lua_d(b1, -1 - unit), marker);
                }
                last = others;
                if (!bad) bad = WRITE(&w, "PEXPIRE", "sc", key, lua_d(b1, last - nowms + (double)slack));
            }
        }
    }
    if (bad) return error(ctx, w.err);

    /* the key's unit delay and the expiry to wait for only when not 0 and
     * -1, and only for an acquire */
    long long r[6] = {(long long)us, (long long)(n * 4 + status + 2 * held), (long long)last, (long long)others,
                      (long long)unit, (long long)wait};
    int nr = take && (unit != 0 || wait != -1) ? (wait != -1 ? 6 : 5) : 4;
    ReplyWithArray(ctx, nr);
    for (int j = 0; j < nr; j++) ReplyWithLongLong(ctx, r[j]);
    return RM_OK;

other:
    CloseKey(k);
    ReplyWithArray(ctx, 2);
    ReplyWithLongLong(ctx, (long long)us);
    return ReplyWithLongLong(ctx, -1);
}

/* --- One take on a packed sliding log: log.lua. --- */

/* get6 reads the 6-byte big-endian entry at p, as struct.unpack('>I6'). */
static double get6(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    unsigned long long v = 0;
    for (int i = 0; i < 6; i++) v = v << 8 | u[i];
    return (double)v;
}

/* put6 writes x as a 6-byte big-endian entry at p, as struct.pack('>I6')
 * does (a C cast, its low six bytes). */
static void put6(char *p, double x) {
    unsigned long long v = x < 0 ? (unsigned long long)(long long)x : (unsigned long long)x;
    for (int i = 5; i >= 0; i--, v >>= 8) p[i] = (char)(v & 0xff);
}

/* FUNNEL.LOG version 1 key arg...: log.lua, on doubles as Lua computes it:
 * one GET, the entries read where they are, and one write for an
 * admission. */
static int LogCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    timed_call call;
    if (!timed_head(ctx, argv, argc, VERSION_ERROR("FUNNEL.LOG"), &call)) return RM_OK;
    if (call.nk != 1) return error(ctx, "ERR funnel: a sliding log call takes one key");
    RedisModuleString **args = call.args, *key = call.keys[0];
    if (call.nargs != 6) return error(ctx, "ERR funnel: a sliding log call takes six arguments");
    double q, count, period;
    if (!arg_exact(args, 4, 0, &q) || q > (double)(1 << 20) || !arg_exact(args, 5, 0, &count) ||
        !arg_exact(args, 6, 1, &period))
        return error(ctx, "ERR funnel: a sliding log's quantity must be an integer from 0 to 2^20, its count one "
                          "from 0 to 2^53-1, its period one from 1 to 2^53-1");
    i128 now;
    if (read_now(ctx, args[1], args[2], &now) != RM_OK) return RM_OK;
    long long nh = (long long)(now / NS), nl = (long long)(now % NS);

    RedisModuleKey *k = OpenKey(ctx, key, RM_READ);
    int type = KeyType(k);
    const char *raw = NULL;
    size_t len = 0, off = 0; /* off: the first entry's offset (from 0) */
    double per = -1;         /* the log's period, as stored; -1: absent */
    if (type == RM_KEYTYPE_STRING) {
        raw = StringDMA(k, &len, RM_READ);
        /* '^L(%d+):()', and whole entries after it */
        size_t i = 1;
        if (raw && len > 0 && raw[0] == 'L') {
            while (i < len && raw[i] >= '0' && raw[i] <= '9') i++;
            if (i > 1 && i < len && raw[i] == ':' && (len - i - 1) % 6 == 0) {
                per = number(raw + 1, i - 1);
                off = i + 1;
            }
        }
    }
    if ((type != RM_KEYTYPE_EMPTY && per < 0) || (type == RM_KEYTYPE_STRING && !raw)) {
        CloseKey(k);
        ReplyWithArray(ctx, 3);
        ReplyWithLongLong(ctx, nh);
        ReplyWithLongLong(ctx, nl);
        return ReplyWithLongLong(ctx, -1);
    }
    double nowms = (double)nh * 1000 + (double)(nl / 1000000);
    size_t total = 0;
    double last = -1;
    if (per >= 0) {
        total = (len - off) / 6;
        if (total > 0) last = get6(raw + off + 6 * (total - 1));
        if (last + per <= nowms) total = 0, last = -1; /* an empty log: as absent */
    }
    /* the entries at or before nowms - period (old of them) no longer
     * count */
    size_t old = 0;
    double cut = nowms - period;
    while (old < total && get6(raw + off + 6 * old) <= cut) old++;
    double n = (double)(total - old), status = 1, wait = -1, newest = n > 0 ? last : -1;
    int write = 0;
    if (n + q > count) {
        status = 0;
        if (q <= count) wait = get6(raw + off + 6 * (size_t)((double)old + n + q - count - 1));
    } else if (q > 0) {
        write = 1;
    }
    writer w = {.ctx = ctx, .base = Milliseconds(), .slack = call.slack};
    int bad = 0;
    if (write) {
        /* recorded at the millisecond at or after now, never below the
         * newest entry (a clock that went back); the old entries dropped */
        double at = nowms;
        if (nl % 1000000 > 0) at = nowms + 1;
        if (last > at) at = last;
        size_t pn;
        const char *pstr = StringPtrLen(args[6], &pn);
        size_t body = n > 0 ? len - off - 6 * old : 0, vn = 2 + pn + body + 6 * (size_t)q;
        char stack[4096], *v = vn <= sizeof stack ? stack : malloc(vn);
        if (!v) {
            CloseKey(k);
            return error(ctx, "ERR funnel: out of memory");
        }
        v[0] = 'L';
        memcpy(v + 1, pstr, pn);
        v[1 + pn] = ':';
        if (body) memcpy(v + 2 + pn, raw + off + 6 * old, body);
        for (size_t j = 0; j < (size_t)q; j++) put6(v + 2 + pn + body + 6 * j, at);
        CloseKey(k); /* (raw is read; the write goes through Redis) */
        k = NULL;
        bad = write_window(&w, key, v, vn, at + period - nowms + (double)call.slack);
        if (v != stack) free(v);
    }
    CloseKey(k);
    if (bad) return error(ctx, w.err);
    ReplyWithArray(ctx, 5);
    ReplyWithLongLong(ctx, nh);
    ReplyWithLongLong(ctx, nl);
    ReplyWithLongLong(ctx, (long long)(n * 4 + status));
    ReplyWithLongLong(ctx, (long long)wait);
    return ReplyWithLongLong(ctx, (long long)newest);
}

/* arg_is reports whether s is word, in any case. */
static int arg_is(RedisModuleString *s, const char *word) {
    size_t n;
    const char *p = StringPtrLen(s, &n);
    if (n != strlen(word)) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != word[i]) return 0;
    }
    return 1;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (api(ctx) != RM_OK) return RM_ERR;
    if (IsModuleNameBusy && IsModuleNameBusy("funnel")) return RM_ERR;
    SetModuleAttribs(ctx, "funnel", 1, RM_APIVER_1);
    raw_values = 0;
    if (argc == 2 && arg_is(argv[0], "encoding") && (arg_is(argv[1], "int") || arg_is(argv[1], "raw"))) {
        raw_values = arg_is(argv[1], "raw");
    } else if (argc != 0) {
        Log(ctx, "warning", "funnel: the module takes no arguments, or: encoding int|raw");
        return RM_ERR;
    }
    pxat = CreateString(NULL, "PXAT", 4);
    marker = CreateString(NULL, "\0conc", 5);
    /* The keys are args 3 on (numkeys says how many): the command gives
     * them through the keys API, and the first key is at 3 for clients that
     * route by COMMAND's legacy key range. Like EVAL, the command is not
     * flagged write or deny-oom but may-replicate: Redis checks each write
     * as it checks a script's (see call_write), so that a Redis that may
     * not write (over maxmemory, a read-only replica, a failed save, too
     * few replicas) still answers the requests that it refuses. */
    if (CreateCommand(ctx, "funnel.gcra", GcraCommand, "may-replicate getkeys-api", 3, 3, 1) != RM_OK ||
        CreateCommand(ctx, "funnel.takes", TakesCommand, "may-replicate getkeys-api", 3, 3, 1) != RM_OK ||
        CreateCommand(ctx, "funnel.window", WindowCommand, "may-replicate getkeys-api", 3, 3, 1) != RM_OK ||
        CreateCommand(ctx, "funnel.conc", ConcCommand, "may-replicate getkeys-api", 3, 3, 1) != RM_OK ||
        CreateCommand(ctx, "funnel.log", LogCommand, "may-replicate getkeys-api", 3, 3, 1) != RM_OK)
        return RM_ERR;
    Log(ctx, "notice", "funnel: FUNNEL.GCRA, FUNNEL.TAKES, FUNNEL.WINDOW, FUNNEL.CONC and FUNNEL.LOG, version " FUNNEL_VERSION " of their arguments; values written %s",
        raw_values ? "in place, as plain strings (encoding raw)" : "by SET (encoding int)");
    return RM_OK;
}

/* RedisModule_OnUnload frees what the module made at load (MODULE UNLOAD). */
int RedisModule_OnUnload(RedisModuleCtx *ctx) {
    (void)ctx;
    if (pxat) FreeString(NULL, pxat);
    pxat = NULL;
    if (marker) FreeString(NULL, marker);
    marker = NULL;
    return RM_OK;
}
