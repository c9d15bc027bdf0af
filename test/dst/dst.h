/*
 * dst: a deterministic simulation of the reservation protocol (docs/testing.md).
 *
 * Two or three extender replicas (the real cache, extender verbs and
 * reservation module each) run in one process against an in-memory API
 * server model. Below the seam everything is simulated: the kube client's
 * request layer (kube_client_new_transport) and the watch streams, whose
 * events the simulator hands straight to the modules' sinks. Time is the
 * clock module's virtual clock; one seeded PRNG makes every choice, so a
 * seed replays exactly.
 *
 * Threads: every piece of replica work that may speak to the API server (a
 * bind, a reaper pass) runs on a thread of its own, but only one thread
 * runs at a time. A thread hands control back to the simulator at every
 * request, sleep and condition wait (clock_virtual_hook), and the
 * simulator picks what happens next: which pending request the API server
 * answers and how, which thread goes on, which watch event arrives.
 */
#ifndef DST_H
#define DST_H

#include "cache.h"
#include "extender.h"
#include "kube.h"
#include "reflector.h"
#include "reserve.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the PRNG every choice comes from ---- */

struct rng {
	uint64_t s;
};
uint64_t rng_next(struct rng *g);
/* 0 <= result < n (n > 0). */
uint32_t rng_below(struct rng *g, uint32_t n);
bool rng_pct(struct rng *g, uint32_t pct);

/* ---- fault kinds: each a switch (--faults) ---- */

enum fault {
	F_LOST,         /* a request applied, its answer lost */
	F_DROP,         /* a request lost before the API server saw it */
	F_429,          /* Too Many Requests, not applied */
	F_500,          /* an internal error, applied or not */
	F_SLOW,         /* an answer after the client's timeout (applied or not) */
	F_LATE,         /* a write applied after its client gave up, until the API server's own deadline */
	F_WATCH_LAG,    /* watch events held back (within the lag bound unless silent) */
	F_WATCH_CLOSE,  /* a watch ends: the reflector relists */
	F_WATCH_SILENT, /* a watch delivers nothing for a while, not closed (finding 2) */
	F_API_RESTART,  /* the API server restarts: every watch ends, requests in flight fail */
	F_REPLICA_RESTART, /* a replica dies (its state lost) and a fresh one starts */
	F_SKEW,         /* the replicas' wall clocks differ */
	F_UNLABEL,      /* the managed label taken off a running GPU pod (finding 1) */
	F_RETRY,        /* kube-scheduler gives up a bind after httpTimeout and places the pod again */
	F_UNWATCHED,    /* GPU pods without the managed label (the webhook was down) */
	F_DELETE,       /* pods deleted */
	F_FINISH,       /* pods finish */
	F_LOSE_ENTRY,   /* an entry of a bound pod goes from its ledger (an edit by hand, a bug) (finding 8) */
	F_KUBELET_RESTART, /* a kubelet restarts: its record kept, it admits its new pods in creation order */
	F_AGENT_RESTART,   /* a node agent restarts: its pod store listed again, kubelet's record read */
	F_GANG,            /* not a fault: gangs (a PodGroup and its members) among the pods created */
	/* not a fault: a check, switched like one */
	F_PROMPT_RELEASE, /* a cleanly refused bind leaves no reservation behind (finding 6) */
	F_NFAULTS
};
extern const char *const dst_fault_names[F_NFAULTS];

/* ---- the API server model (apiserver.c) ---- */

enum watch_kind { W_LEDGERS, W_RESERVATIONS, W_PODS, W_KINDS };

struct watch_event {
	bool deleted;
	cJSON *obj;
	int64_t at_ms;      /* when the API server wrote it */
};

/* One replica's watch of one kind, as the API server streams it. */
struct watch {
	struct watch_event *ev;
	int n, cap;
	bool open;          /* false: closed; the reflector relists */
	bool listed;        /* it has listed once (readiness) */
	int64_t closed_ms;  /* when it was closed */
	int64_t silent_until_ms;
};

/* The pod watches of a node (spec.nodeName=<node>): kubelet's and the node agent's. */
#define DST_NODES 3

enum node_watch_kind { NW_KUBELET, NW_AGENT, NW_KINDS };

#define DST_WALL0_S 1800000000   /* the wall clock at the start (virtual ms 0) */

struct apiserver;
struct apiserver *apis_new(const char *ledger_ns, int nwatchers);
void apis_free(struct apiserver *a);
/* Serves one request (applied now). Returns the HTTP status; body in r. */
long apis_handle(struct apiserver *a, const char *method, const char *path, const char *body,
		 struct kube_response *r);
/* A watcher's watch of a kind (watcher: a replica slot). */
struct watch *apis_watch(struct apiserver *a, int watcher, enum watch_kind k);
/* Closes every watch of the watcher (or of all watchers, -1), dropping undelivered events. */
void apis_close_watches(struct apiserver *a, int watcher);
/* Feeds a relist of the kind into sink (begin, apply each, end) and opens the watch. */
void apis_relist(struct apiserver *a, int watcher, enum watch_kind k, const struct reflector_sink *sink);
/* Drops the first n events of a watch. */
void apis_watch_pop(struct watch *w, int n);

/* A node's pod watch (node: its index). */
struct watch *apis_node_watch(struct apiserver *a, int node, enum node_watch_kind k);
/* The pods bound to a node now (a PodList's items; caller deletes). */
cJSON *apis_node_pods(struct apiserver *a, int node);
/* Opens a node's watch again after a list (the caller applied apis_node_pods). */
void apis_node_relist(struct apiserver *a, int node, enum node_watch_kind k);
/* status.phase of a pod, as kubelet writes it. 0, or -1 when there is no such pod. */
int apis_pod_phase(struct apiserver *a, const char *ns, const char *name, const char *phase);

/* Pods, as the simulation's actors change them. */
/* group: the PodGroup it belongs to (label scheduling.x-k8s.io/pod-group), or NULL. */
int apis_pod_create(struct apiserver *a, const char *ns, const char *name, int gpus, bool managed, const char *group,
		    char *uid, size_t size);
/* A coscheduling PodGroup (what the gang code reads of a gang). */
int apis_podgroup_create(struct apiserver *a, const char *ns, const char *name, int min, int timeout_s);
int apis_pod_delete(struct apiserver *a, const char *ns, const char *name);
int apis_pod_finish(struct apiserver *a, const char *ns, const char *name);
int apis_pod_unlabel(struct apiserver *a, const char *ns, const char *name);
/* Takes uid's entry out of node's ledger (as an edit by hand would). 0, or -1 when it holds none. */
int apis_ledger_drop(struct apiserver *a, const char *node, const char *uid);
/* The garbage collector: deletes Leases whose owner pod is gone. Returns how many. */
int apis_gc(struct apiserver *a);

/* What the checks read. */
struct apis_pod {
	const char *ns, *name, *uid, *node;    /* node "" while unbound */
	const char *allocated;                 /* the annotation, or NULL */
	bool finished, managed;
	int gpus;
};
int apis_pods(struct apiserver *a, struct apis_pod *out, int max);
/* The ledger Lease of a node (NULL: none); the tree stays the model's. */
const cJSON *apis_ledger(struct apiserver *a, const char *node);
/* Counters for the summary. */
struct apis_stats {
	long requests, conflicts, bindings, unmodelled;
};
void apis_stats(struct apiserver *a, struct apis_stats *out);
int64_t apis_now_ms(struct apiserver *a);
void apis_set_now_ms(struct apiserver *a, int64_t ms);


/* ---- replicas and their threads (sched.c) ---- */

#define DST_SLOTS 3
#define DST_NS "gpu-system"

struct world;

/* One life of a replica: its process state, lost when it restarts. */
struct incarnation {
	struct world *w;
	int slot, gen;
	bool dead;
	char identity[64];
	struct api_resources res;
	struct kube_client *client;
	struct cache *cache;
	struct reserve *resv;
	struct extender *x;
	struct reflector_sink sink[W_KINDS];
	int tasks;            /* its threads not done yet */
	long faults;          /* faults its threads' requests met so far */
	bool reaping;         /* a reaper pass is under way */
	bool reconciled;      /* a reaper pass ran after its lists (ready) */
	struct incarnation *next_dead;
};

enum task_state { T_NEW, T_RUN, T_REQ, T_YIELD, T_DONE };

/* A thread of replica work: a bind or a reaper pass. */
struct task {
	int id;
	struct incarnation *inc;
	enum task_state st;
	pthread_t th;
	void (*fn)(struct task *t);
	char what[96];
	int pod;              /* the bind's (or filter's) pod (world.pods), or -1 */
	bool filter;          /* a filter (a gang member's: the gang code writes from it), not a bind */
	char *fbody;          /* the filter's ExtenderArgs; then its answer (heap) */
	char body[768];       /* the bind's ExtenderBindingArgs */
	bool ok;              /* the bind's answer: no Error */
	bool faulted;         /* one of its requests met a fault (no answer, 5xx, 429 but on the binding) */
	long faults0;         /* inc->faults when it started: a write of another thread may carry its edit */
	char error[512];
	/* the request it waits on (T_REQ) */
	const char *method, *path, *rbody;
	long timeout_s;
	int64_t sent_ms;
	bool stuck;           /* (slow) held by the API server until the client gives up */
	struct kube_response *resp;
	char *err;
	size_t errlen;
	int rc;
	int resumes;          /* how often the simulator let it run */
	struct task *next;
};

/* What kube-scheduler knows of a pod it places. */
enum spod_state { S_PENDING, S_BINDING, S_DONE };
struct spod {
	char ns[16], name[32], uid[64];
	int gpus;
	enum spod_state st;
	struct task *bind;     /* the try it waits on (S_BINDING) */
	int64_t bind_since_ms;
	int tries;
	bool faulted;          /* one of its tries met a fault */
	char gang[16];         /* its PodGroup, or "" */
	int gang_size;
	bool touched;          /* deleted, finished or unlabelled: its gang may rightly stay incomplete */
	bool edited_waiting;   /* unlabelled bound, before its container ran: a list shows that write */
};

/* What the kubelet models did (the summary's counts). */
struct node_stats {
	long admitted, admit_failed;      /* pods past admission; pods kubelet failed there */
	long prestart_refused;            /* containers PreStartContainer refused (each once) */
	long prestart_later;              /* of those, started at a later try */
	long unverified;                  /* containers started with no check possible */
	long refused_at_end;              /* live pods whose container is still refused at quiescence */
	long kubelet_restarts, agent_restarts;
};
struct node_sim;

#define DST_MAX_PODS 256
#define DST_TRACE 48

/* A write whose client gave up that the API server still carries out (a write waiting for etcd). */
struct late_write {
	char *method, *path, *body;
	char what[96];
	int64_t at_ms;     /* when it is applied: at most the API server's deadline for it */
};

struct world {
	struct rng g;
	uint64_t seed;
	bool fault[F_NFAULTS];
	bool faults_on;            /* false at quiescence */
	bool verbose;
	int nslots, steps;
	int bind_timeout_s;        /* the replicas' --bind-timeout */
	struct apiserver *api;
	int64_t now_ms;            /* virtual monotonic and wall time base */
	int64_t wall0_s;
	int64_t skew_s[DST_SLOTS];
	int64_t api_down_until_ms;
	struct incarnation *inc[DST_SLOTS];
	struct incarnation *dead;  /* incarnations whose threads still run */
	struct task *tasks;
	int ntasks, task_ids, gens;
	struct spod pods[DST_MAX_PODS];
	int npods;
	char trace[DST_TRACE][240];
	long step, traced;
	char failure[1024];
	long bound, refused;       /* binds' answers, for the summary */
	bool failure_pending;      /* a check outside the step checks failed (failure says which) */
	char lost[8][64];          /* uids whose ledger entry lose-entry took (until it is back) */
	int nlost;
	struct node_sim *node[DST_NODES];
	struct node_stats node_stats;
	int ngangs;
	long filter_passed;        /* gang members' filters that found a node */
	long filter_waiting;       /* those that found the gang's places not all written (yet, or any more) */
	long gangs_complete, gangs_none;   /* at quiescence */
	struct late_write *late;   /* writes the API server holds after their client gave up */
	int nlate;
};

void dst_trace(struct world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* sched.c */
void sched_init(void);
/* Starts fn on a thread of its own for inc; it runs until its first yield. */
struct task *sched_spawn(struct world *w, struct incarnation *inc, void (*fn)(struct task *), const char *what);
/* Lets t run until it yields or ends; then reaps it if done (returns true). */
bool sched_resume(struct world *w, struct task *t);
/*
 * Answers t's pending request. apply: the model applies it. status 1: the
 * model's own answer; 0: none comes (the client sees err); else that HTTP
 * status (429, 500) instead of the model's.
 */
void sched_answer(struct world *w, struct task *t, bool apply, long status, const char *err);
/* kube_transport_fn; ctx is the struct incarnation. */
int sched_transport(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
		    long timeout_s, struct kube_response *r, char *err, size_t errlen);
/* Sets the virtual clock as the slot's replica reads it. */
void sched_clock(struct world *w, int slot);
/* The task done hook, in dst.c: kube-scheduler reads a bind's answer, a reaper pass ends. */
void dst_task_done(struct world *w, struct task *t);

/* node.c: kubelet and the node agent's device plugin on each node. */
void node_init(struct world *w);
void node_free(struct world *w);
/* Delivers up to max events (0: all) of a node's watch; a closed one is listed again. */
void node_deliver(struct world *w, int node, enum node_watch_kind k, int max);
/* kubelet starts one container it admitted (or tries a refused one again); false when none waits. */
bool node_start_one(struct world *w, int node);
void node_start_all(struct world *w);
void node_kubelet_restart(struct world *w, int node);
void node_agent_restart(struct world *w, int node);
/* kubelet stops the pod (finished, or deleted) before the API server shows it. */
void node_pod_stopped(struct world *w, const char *node, const char *uid);
/* Whether kubelet runs the pod's container (only such a pod can finish). */
bool node_runs(struct world *w, const char *node, const char *uid);
/* The API server restarts: the nodes' watches end. */
void node_close_watches(struct world *w);
/* The nodes' invariants; exempt: pods lose-entry touched. 0, or -1 with failure set. */
int node_check(struct world *w, char *failure, size_t size, bool (*exempt)(struct world *, const char *));
int node_check_quiescent(struct world *w, char *failure, size_t size, bool (*exempt)(struct world *, const char *));

/* check.c: the invariants. 0, or -1 with w->failure set. */
int check_step(struct world *w);
int check_quiescent(struct world *w);
/* A bind refused cleanly (no fault met by any try of its pod, none in flight, the pod unbound) left no entry. */
int check_refused_bind(struct world *w, const struct task *t);

#endif
