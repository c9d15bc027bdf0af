/*
 * kubectl-gpu: the `kubectl gpu` plugin's entry point. Parses kubectl's
 * flags, reads the lists from the API server (never the extender), builds
 * the model and prints a report (docs/kubectl-gpu.md).
 */
#include "kgpu.h"
#include "kube.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIST_PAGE 500

struct opts {
	const char *cmd, *arg;
	const char *ns, *context, *kubeconfig, *output, *lease_ns;
	bool all_ns, no_color, version;
};

static const char usage[] =
	"kubectl gpu: the cluster's GPUs as the API server records them (ledgers, GpuNodeStatus, pods)\n"
	"\n"
	"  kubectl gpu nodes            per node: GPUs total, held whole, shared, free, unhealthy; models; fragmentation\n"
	"  kubectl gpu node NAME        each device of the node and who holds it\n"
	"  kubectl gpu pods             GPU pods with their devices, node, claim and gang (-A: every namespace)\n"
	"  kubectl gpu why POD          why a pod waits: the extender's reasons per node, its gang, its fit\n"
	"\n"
	"Flags: -n, --namespace NS   -A, --all-namespaces   -o, --output wide|json|yaml|html (html: node, nodes)\n"
	"       --context NAME   --kubeconfig FILE (else $KUBECONFIG, else ~/.kube/config)\n"
	"       --lease-namespace NS (the extender's, default gpu-system)   --no-color   --version\n";

/* "--flag=value" or "--flag value"; advances *i past what it took. NULL when argv[*i] is not that flag. */
static const char *flag_value(int argc, char **argv, int *i, const char *s, const char *l, bool *bad)
{
	const char *a = argv[*i];
	size_t ll = strlen(l);
	if (!strncmp(a, l, ll) && a[ll] == '=')
		return a + ll + 1;
	if (strcmp(a, l) && (!s || strcmp(a, s)))
		return NULL;
	if (*i + 1 >= argc) {
		*bad = true;
		return NULL;
	}
	return argv[++*i];
}

static int parse(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->lease_ns = "gpu-system";
	for (int i = 1; i < argc; i++) {
		bool bad = false;
		const char *v;
		if ((v = flag_value(argc, argv, &i, "-n", "--namespace", &bad)))
			o->ns = v;
		else if ((v = flag_value(argc, argv, &i, "-o", "--output", &bad)))
			o->output = v;
		else if ((v = flag_value(argc, argv, &i, NULL, "--context", &bad)))
			o->context = v;
		else if ((v = flag_value(argc, argv, &i, NULL, "--kubeconfig", &bad)))
			o->kubeconfig = v;
		else if ((v = flag_value(argc, argv, &i, NULL, "--lease-namespace", &bad)))
			o->lease_ns = v;
		else if (bad) {
			fprintf(stderr, "error: flag %s needs a value\n", argv[i]);
			return -1;
		} else if (!strcmp(argv[i], "-A") || !strcmp(argv[i], "--all-namespaces"))
			o->all_ns = true;
		else if (!strcmp(argv[i], "--no-color"))
			o->no_color = true;
		else if (!strcmp(argv[i], "--version") || (!strcmp(argv[i], "version") && !o->cmd)) {
			o->version = true;
			return 1;
		}
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") || !strcmp(argv[i], "help"))
			return 1;
		else if (argv[i][0] == '-') {
			fprintf(stderr, "error: unknown flag %s\n%s", argv[i], usage);
			return -1;
		} else if (!o->cmd)
			o->cmd = argv[i];
		else if (!o->arg)
			o->arg = argv[i];
		else {
			fprintf(stderr, "error: unexpected argument %s\n", argv[i]);
			return -1;
		}
	}
	if (!o->cmd)
		return 1;
	if (o->output && strcmp(o->output, "wide") && strcmp(o->output, "json") && strcmp(o->output, "yaml") &&
	    strcmp(o->output, "html")) {
		fprintf(stderr, "error: --output must be wide, json, yaml or html\n");
		return -1;
	}
	bool needs_arg = !strcmp(o->cmd, "node") || !strcmp(o->cmd, "why");
	if (strcmp(o->cmd, "nodes") && strcmp(o->cmd, "pods") && !needs_arg) {
		fprintf(stderr, "error: unknown command %s\n%s", o->cmd, usage);
		return -1;
	}
	if (needs_arg != (o->arg != NULL)) {
		fprintf(stderr, "error: %s %s\n", o->cmd, needs_arg ? "needs a name" : "takes no argument");
		return -1;
	}
	if (o->output && !strcmp(o->output, "html") && strcmp(o->cmd, "node") && strcmp(o->cmd, "nodes")) {
		fprintf(stderr, "error: -o html is for node and nodes\n");
		return -1;
	}
	return 0;
}

/* As kubectl: --kubeconfig, else the first file of $KUBECONFIG that exists, else ~/.kube/config, else in-cluster. */
static int load_config(const struct opts *o, struct kube_config *cfg, char *err, size_t errlen)
{
	char path[KUBE_PATH_MAX] = "";
	const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
	if (o->kubeconfig) {
		snprintf(path, sizeof(path), "%s", o->kubeconfig);
	} else if (env && *env) {
		char *list = strdup(env), *save = NULL;
		for (char *p = list ? strtok_r(list, ":", &save) : NULL; p; p = strtok_r(NULL, ":", &save))
			if (!access(p, R_OK)) {
				snprintf(path, sizeof(path), "%s", p);
				break;
			}
		free(list);
	} else if (home) {
		snprintf(path, sizeof(path), "%s/.kube/config", home);
		if (access(path, R_OK))
			path[0] = 0;
	}
	if (path[0])
		return kube_config_load(cfg, path, o->context, err, errlen);
	return kube_config_in_cluster(cfg, err, errlen);
}

/*
 * Every item of a list (paged). 0 with *items; with *items NULL and why in
 * err, 1 when the API refused it (403), 2 when it does not serve it (404),
 * -1 otherwise.
 */
static int list_all(struct kube_client *kc, const char *path, cJSON **items, char *err, size_t errlen)
{
	*items = cJSON_CreateArray();
	char cont[2048] = "";
	do {
		struct buf url;
		buf_init(&url, 8192);
		buf_printf(&url, "%s%slimit=%d", path, strchr(path, '?') ? "&" : "?", LIST_PAGE);
		if (cont[0]) {
			buf_adds(&url, "&continue=");
			kube_escape(&url, cont);
		}
		struct kube_response r;
		kube_response_init(&r);
		int rc = kube_request(kc, "GET", buf_cstr(&url), NULL, NULL, 30, &r, err, errlen);
		buf_release(&url);
		cJSON *page = rc ? NULL : cJSON_Parse(buf_cstr(&r.body));
		if (!rc && r.status != 200) {
			char msg[512];
			snprintf(err, errlen, "%s: HTTP %ld: %s", path, r.status, kube_status_message(&r, msg, sizeof(msg)));
			rc = r.status == 403 ? 1 : r.status == 404 ? 2 : -1;
		} else if (!rc && !page) {
			snprintf(err, errlen, "%s: the answer is not JSON", path);
			rc = -1;
		}
		kube_response_release(&r);
		if (rc) {
			cJSON_Delete(page);
			cJSON_Delete(*items);
			*items = NULL;
			return rc;
		}
		cJSON *arr = cJSON_GetObjectItemCaseSensitive(page, "items");
		while (arr && arr->child)
			cJSON_AddItemToArray(*items, cJSON_DetachItemViaPointer(arr, arr->child));
		const char *c = api_str(api_path(page, "metadata"), "continue");
		snprintf(cont, sizeof(cont), "%s", c ? c : "");
		cJSON_Delete(page);
	} while (cont[0]);
	return 0;
}

struct lists {
	cJSON *gns, *ledgers, *nodes, *pods, *claims, *podgroups, *workloads, *k8s_podgroups;
};

static void lists_release(struct lists *l)
{
	cJSON_Delete(l->gns);
	cJSON_Delete(l->ledgers);
	cJSON_Delete(l->nodes);
	cJSON_Delete(l->pods);
	cJSON_Delete(l->claims);
	cJSON_Delete(l->podgroups);
	cJSON_Delete(l->workloads);
	cJSON_Delete(l->k8s_podgroups);
}

/* A list the report can do without: refused or absent leaves it NULL (the model notes it). */
static int optional(struct kube_client *kc, const char *path, cJSON **items)
{
	char err[1024];
	int rc = list_all(kc, path, items, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "error: %s\n", err);
	return rc < 0 ? -1 : 0;
}

/* A namespaced collection's path: every namespace, or ns. */
static void ns_path(char *out, size_t size, const char *prefix, const char *ns, const char *res)
{
	if (ns)
		snprintf(out, size, "%s/namespaces/%s/%s", prefix, ns, res);
	else
		snprintf(out, size, "%s/%s", prefix, res);
}

/*
 * The gangs of Kubernetes' own API, for `why` (a gang's size): 1.35's
 * Workloads (scheduling.k8s.io/v1alpha1) and the PodGroups of
 * scheduling.k8s.io (1.36 on) in the newest version served, as the
 * extender reads them (src/reserve/reserve_gang.c). A list answers 404 only
 * when its version does not serve it, so trying the versions in turn finds
 * the one served; none served leaves the list NULL.
 */
static int fetch_k8s_gangs(struct kube_client *kc, const char *scope, struct lists *l)
{
	static const char *const versions[] = { API_PODGROUP_VERSIONS };
	char prefix[64], path[1024], err[1024];
	ns_path(path, sizeof(path), "/apis/scheduling.k8s.io/v1alpha1", scope, "workloads");
	if (optional(kc, path, &l->workloads))
		return -1;
	for (size_t i = 0; !l->k8s_podgroups && i < sizeof(versions) / sizeof(versions[0]); i++) {
		snprintf(prefix, sizeof(prefix), "/apis/scheduling.k8s.io/%s", versions[i]);
		ns_path(path, sizeof(path), prefix, scope, "podgroups");
		int rc = list_all(kc, path, &l->k8s_podgroups, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "error: %s\n", err);
			return -1;
		}
		if (rc == 1)
			break;   /* refused: read as not there */
	}
	return 0;
}

static int fetch(struct kube_client *kc, const struct opts *o, const char *ns, struct lists *l, struct kg_inputs *in)
{
	char path[1024], err[1024];
	bool pods_cmd = !strcmp(o->cmd, "pods"), why = !strcmp(o->cmd, "why");
	const char *scope = pods_cmd || why ? (o->all_ns && !why ? NULL : ns) : NULL;
	if (!pods_cmd && optional(kc, "/apis/gpu.scheduling/v1/gpunodestatuses", &l->gns))
		return -1;
	snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases?labelSelector=%s%%3Dtrue",
		 o->lease_ns, "gpu.scheduling%2Fledger");
	if (optional(kc, path, &l->ledgers) || (why && optional(kc, "/api/v1/nodes", &l->nodes)))
		return -1;
	/* Pods: the nodes reports name holders in every namespace the reader may read. */
	ns_path(path, sizeof(path), "/api/v1", scope, "pods");
	int rc = list_all(kc, path, &l->pods, err, sizeof(err));
	if (rc > 0 && !scope) {
		if (pods_cmd) {
			fprintf(stderr, "error: %s\n", err);
			return -1;
		}
		scope = ns;
		in->pods_refused = true;
		ns_path(path, sizeof(path), "/api/v1", scope, "pods");
		rc = list_all(kc, path, &l->pods, err, sizeof(err));
	}
	if (rc) {
		fprintf(stderr, "error: %s\n", err);
		return -1;
	}
	ns_path(path, sizeof(path), "/apis/gpu.scheduling/v1", scope, "gpuclaims");
	if (optional(kc, path, &l->claims))
		return -1;
	ns_path(path, sizeof(path), "/apis/scheduling.x-k8s.io/v1alpha1", scope, "podgroups");
	if (why && (optional(kc, path, &l->podgroups) || fetch_k8s_gangs(kc, scope, l)))
		return -1;
	bool refused = in->pods_refused;
	*in = (struct kg_inputs){ l->gns, l->ledgers, l->nodes, l->pods, l->claims, l->podgroups,
				  l->workloads, l->k8s_podgroups, scope, refused };
	return 0;
}

static cJSON *report(const struct kg_cluster *c, const struct opts *o, const char *ns, char *err, size_t errlen)
{
	if (!strcmp(o->cmd, "nodes"))
		return kg_report_nodes(c, err, errlen);
	if (!strcmp(o->cmd, "node"))
		return kg_report_node(c, o->arg, err, errlen);
	if (!strcmp(o->cmd, "pods"))
		return kg_report_pods(c, err, errlen);
	return kg_report_why(c, ns, o->arg, err, errlen);
}

static int print(const cJSON *doc, const struct opts *o)
{
	struct buf out;
	buf_init(&out, (size_t)1 << 30);
	int rc;
	if (o->output && !strcmp(o->output, "json")) {
		char *s = cJSON_Print(doc);
		rc = s ? buf_adds(&out, s) | buf_addc(&out, '\n') : -1;
		free(s);
	} else if (o->output && !strcmp(o->output, "yaml")) {
		rc = kg_yaml(doc, &out);
	} else {
		const char *nc = getenv("NO_COLOR");
		struct kg_style st = { .wide = o->output != NULL,
				       .color = !o->no_color && (!nc || !*nc) && isatty(STDOUT_FILENO) };
		rc = kg_render(o->cmd, doc, &st, &out);
	}
	if (!rc)
		fwrite(buf_cstr(&out), 1, out.len, stdout);
	buf_release(&out);
	return rc;
}

static int print_html(const struct kg_cluster *c, const struct opts *o)
{
	struct buf out;
	char err[512];
	buf_init(&out, (size_t)1 << 30);
	int rc = kg_html(c, !strcmp(o->cmd, "node") ? o->arg : NULL, &out, err, sizeof(err));
	if (rc)
		fprintf(stderr, "error: %s\n", err);
	else
		fwrite(buf_cstr(&out), 1, out.len, stdout);
	buf_release(&out);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int p = parse(argc, argv, &o);
	if (p > 0 && o.version)
		return printf("kubectl-gpu %s\n", GPU_VERSION) < 0;
	if (p)
		return p > 0 ? (fputs(usage, stdout), 0) : 2;
	log_setup(LOG_WARN, false);
	struct kube_config cfg;
	char err[1024];
	kube_config_init(&cfg);
	if (load_config(&o, &cfg, err, sizeof(err))) {
		fprintf(stderr, "error: %s\n", err);
		kube_config_release(&cfg);
		return 1;
	}
	struct kube_client *kc = kube_client_new(&cfg, err, sizeof(err));
	const char *ns = o.ns ? o.ns : cfg.namespace[0] ? cfg.namespace : "default";
	struct lists l = { 0 };
	struct kg_inputs in = { 0 };
	struct kg_cluster c;
	cJSON *doc = NULL;
	int rc = 1;
	if (!kc)
		fprintf(stderr, "error: %s\n", err);
	else if (!fetch(kc, &o, ns, &l, &in) && !kg_cluster_build(&c, &in, err, sizeof(err))) {
		if (o.output && !strcmp(o.output, "html"))
			rc = print_html(&c, &o);
		else if (!(doc = report(&c, &o, ns, err, sizeof(err))))
			fprintf(stderr, "error: %s\n", err);
		else
			rc = print(doc, &o) ? 1 : 0;
		kg_cluster_release(&c);
	}
	cJSON_Delete(doc);
	lists_release(&l);
	kube_client_free(kc);
	kube_config_release(&cfg);
	return rc;
}
