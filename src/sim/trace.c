/*
 * Trace readers: the openb node and pod CSVs (and the standalone inventory
 * for nodes). Columns are found by their header names, so extra or
 * reordered columns are fine; the time columns are ignored.
 */
#include "intern.h"
#include "inventory.h"
#include "sim_impl.h"
#include "strmap.h"
#include "strnum.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_MAX_BYTES (512u << 20)
#define MAX_COLS 32
#define FIELD_MAX 200

/* ---- small CSV splitter (no quoting: the openb files have none) ---- */

struct csv {
	const char *p;        /* next line */
	int line;
	int ncol;
	const char *col[MAX_COLS];
	size_t len[MAX_COLS];
};

/* Splits the next non-empty line into fields; false at the end. */
static bool csv_next(struct csv *c)
{
	for (;;) {
		if (!*c->p)
			return false;
		const char *start = c->p;
		const char *end = strchr(start, '\n');
		if (!end)
			end = start + strlen(start);
		c->p = *end ? end + 1 : end;
		c->line++;
		const char *stop = end;
		if (stop > start && stop[-1] == '\r')
			stop--;
		if (stop == start)
			continue;
		c->ncol = 0;
		const char *f = start;
		for (;;) {
			const char *comma = memchr(f, ',', (size_t)(stop - f));
			const char *fe = comma ? comma : stop;
			if (c->ncol < MAX_COLS) {
				c->col[c->ncol] = f;
				c->len[c->ncol] = (size_t)(fe - f);
				c->ncol++;
			}
			if (!comma)
				break;
			f = comma + 1;
		}
		return true;
	}
}

/* Field i as a C string in out[FIELD_MAX] ("" when missing); false when too long. */
static bool csv_field(const struct csv *c, int i, char *out)
{
	out[0] = '\0';
	if (i < 0 || i >= c->ncol)
		return true;
	size_t len = c->len[i];
	if (len >= FIELD_MAX)
		return false;
	memcpy(out, c->col[i], len);
	out[len] = '\0';
	return true;
}

static int csv_find(const struct csv *c, const char *name)
{
	for (int i = 0; i < c->ncol; i++)
		if (c->len[i] == strlen(name) && !strncmp(c->col[i], name, c->len[i]))
			return i;
	return -1;
}

/*
 * Reads the header line: the column of each name, -1 for a missing one
 * whose bit is set in optional. what names the list in the reasons.
 */
static int csv_header(struct csv *c, const char *what, const char *const *names, int n,
		      unsigned optional, int *col, char *err, size_t errsz)
{
	if (!csv_next(c)) {
		snprintf(err, errsz, "empty %s", what);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		col[i] = csv_find(c, names[i]);
		if (col[i] < 0 && !(optional & 1u << i)) {
			snprintf(err, errsz, "%s: no column '%s' in the header", what, names[i]);
			return -1;
		}
	}
	return 0;
}

static bool field_i64(const struct csv *c, int i, int64_t min, int64_t max, int64_t *out)
{
	char s[FIELD_MAX];
	if (!csv_field(c, i, s) || !strnum_i64(s, out))
		return false;
	return *out >= min && *out <= max;
}

/* The whole file in b (NUL-terminated); 0 or -1 with err set. */
static int slurp(const char *path, struct buf *b, char *err, size_t errsz)
{
	buf_init(b, TRACE_MAX_BYTES);
	if (buf_read_file(b, path, err, errsz)) {
		buf_release(b);
		return -1;
	}
	return 0;
}

/* Puts "PATH: " before the reason already in err. */
static void err_in(const char *path, char *err, size_t errsz)
{
	char e2[256];
	snprintf(e2, sizeof(e2), "%s: %s", path, err);
	snprintf(err, errsz, "%s", e2);
}

/* ---- nodes ---- */

void sim_cluster_release(struct sim_cluster *c)
{
	for (int i = 0; i < c->nnode; i++)
		gpu_node_free(c->nodes[i]);
	free(c->nodes);
	memset(c, 0, sizeof(*c));
}

static void cluster_capacity(struct sim_cluster *c)
{
	c->gpu_milli = 0;
	for (int i = 0; i < c->nnode; i++)
		for (int k = 0; k < c->nodes[i]->ndev; k++) {
			const struct gpu_device *d = &c->nodes[i]->dev[k];
			if (gpu_usable(d) && !d->mig)
				c->gpu_milli += GPU_CORE_FULL;
		}
}

static struct gpu_node *csv_node(const struct csv *c, const int *col, char *err, size_t errsz)
{
	char name[FIELD_MAX], model[FIELD_MAX];
	int64_t cpu, mem, gpus;
	if (!csv_field(c, col[0], name) || !name[0]) {
		snprintf(err, errsz, "line %d: empty node name", c->line);
		return NULL;
	}
	if (!field_i64(c, col[1], 0, INT64_MAX / 4, &cpu) ||
	    !field_i64(c, col[2], 0, INT64_MAX / 4, &mem) ||
	    !field_i64(c, col[3], 0, GPU_MAX_DEVICES, &gpus)) {
		snprintf(err, errsz, "line %d: bad cpu_milli, memory_mib or gpu", c->line);
		return NULL;
	}
	const char *shared_model = csv_field(c, col[4], model) ? intern(model) : NULL;
	if (!shared_model) {
		snprintf(err, errsz, "line %d: model name longer than %d bytes, or more than %d distinct", c->line,
			 INTERN_MAX_LEN, INTERN_MAX_STRINGS);
		return NULL;
	}
	struct gpu_node *n = gpu_node_new(name);
	if (!n) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	n->cpu_cap = cpu;
	n->mem_cap = mem;
	for (int g = 0; g < (int)gpus; g++) {
		struct gpu_device d;
		struct gpu_device_info in;
		memset(&d, 0, sizeof(d));
		memset(&in, 0, sizeof(in));
		d.id = g;
		d.island = -1;
		d.vendor = GPU_VENDOR_NVIDIA;   /* the openb traces are of NVIDIA GPUs (V100, T4, A10, ...): data, not a vendor rule */
		in.model = shared_model;
		if (gpu_node_add_device(n, &d, &in)) {
			gpu_node_free(n);
			snprintf(err, errsz, "out of memory");
			return NULL;
		}
	}
	return n;
}

int sim_parse_nodes(const char *text, struct sim_cluster *out, char *err, size_t errsz)
{
	memset(out, 0, sizeof(*out));
	struct csv c = { .p = text };
	static const char *const names[] = { "sn", "cpu_milli", "memory_mib", "gpu", "model" };
	int col[5];
	if (csv_header(&c, "node list", names, 5, 0, col, err, errsz))
		return -1;
	int cap = 0;
	while (csv_next(&c)) {
		if (out->nnode == cap) {
			cap = cap ? cap * 2 : 256;
			struct gpu_node **v = realloc(out->nodes, (size_t)cap * sizeof(*v));
			if (!v) {
				snprintf(err, errsz, "out of memory");
				goto fail;
			}
			out->nodes = v;
		}
		struct gpu_node *n = csv_node(&c, col, err, errsz);
		if (!n)
			goto fail;
		out->nodes[out->nnode++] = n;
	}
	if (!out->nnode) {
		snprintf(err, errsz, "node list has no nodes");
		goto fail;
	}
	cluster_capacity(out);
	return 0;
fail:
	sim_cluster_release(out);
	return -1;
}

/* The standalone inventory (a Kubernetes List of Node / GpuNodeStatus). */
static int inventory_nodes(struct buf *b, struct sim_cluster *out, char *err, size_t errsz)
{
	if (b->len > INVENTORY_MAX_BYTES) {
		snprintf(err, errsz, "an inventory is limited to %u bytes", INVENTORY_MAX_BYTES);
		return -1;
	}
	struct gpu_node **nodes;
	size_t n;
	if (inventory_parse_nodes(buf_cstr(b), b->len, &nodes, &n, err, errsz))
		return -1;
	if (!n) {
		free(nodes);
		snprintf(err, errsz, "no nodes");
		return -1;
	}
	out->nodes = nodes;
	out->nnode = (int)n;
	cluster_capacity(out);
	return 0;
}

int sim_read_nodes(const char *path, struct sim_cluster *out, char *err, size_t errsz)
{
	memset(out, 0, sizeof(*out));
	struct buf b;
	if (slurp(path, &b, err, errsz))
		return -1;
	const char *p = buf_cstr(&b);
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	bool csv = !(*p == '{' || *p == '[' || !strncmp(p, "apiVersion", 10) ||
		     !strncmp(p, "kind", 4) || !strncmp(p, "---", 3) || !strncmp(p, "items", 5));
	int rc = csv ? sim_parse_nodes(buf_cstr(&b), out, err, errsz) : inventory_nodes(&b, out, err, errsz);
	buf_release(&b);
	if (rc)
		err_in(path, err, errsz);
	return rc;
}

/* ---- pods ---- */

void sim_trace_release(struct sim_trace *t)
{
	for (int i = 0; i < t->nshape; i++)
		claim_release(&t->shapes[i]);
	free(t->shapes);
	free(t->tasks);
	memset(t, 0, sizeof(*t));
}

/*
 * The index of c among the distinct claims (added when new). shapes maps
 * the fields a trace row sets (see csv_claim) to index + 1.
 */
static int shape_index(struct sim_trace *t, struct strmap *shapes, int *cap, const struct claim *c)
{
	char key[sizeof(c->models) + 96];
	snprintf(key, sizeof(key), "%d/%d/%u/%lld/%lld/%s", (int)c->mode, c->count, c->core,
		 (long long)c->cpu_milli, (long long)c->mem_mib_host, c->models);
	intptr_t known = (intptr_t)strmap_get(shapes, key);
	if (known)
		return (int)known - 1;
	if (t->nshape == *cap) {
		int ncap = *cap ? *cap * 2 : 64;
		struct claim *v = realloc(t->shapes, (size_t)ncap * sizeof(*v));
		if (!v)
			return -1;
		t->shapes = v;
		*cap = ncap;
	}
	void *old;
	if (strmap_put(shapes, key, (void *)(intptr_t)(t->nshape + 1), &old))
		return -1;
	t->shapes[t->nshape] = *c;
	return t->nshape++;
}

/* Row -> claim, as the benchmark's simulator reads it (section 3). */
static int csv_claim(const struct csv *c, const int *col, struct claim *cl, char *err, size_t errsz)
{
	int64_t cpu, mem, num, milli;
	if (!field_i64(c, col[0], 0, INT64_MAX / 4, &cpu) ||
	    !field_i64(c, col[1], 0, INT64_MAX / 4, &mem) ||
	    !field_i64(c, col[2], 0, GPU_MAX_DEVICES, &num) ||
	    !field_i64(c, col[3], 0, GPU_CORE_FULL, &milli)) {
		snprintf(err, errsz, "line %d: bad cpu_milli, memory_mib, num_gpu or gpu_milli", c->line);
		return -1;
	}
	char spec[FIELD_MAX];
	if (!csv_field(c, col[4], spec) || strlen(spec) >= sizeof(cl->models)) {
		snprintf(err, errsz, "line %d: gpu_spec too long", c->line);
		return -1;
	}
	if (num > 1 && milli > 0 && milli < GPU_CORE_FULL) {
		snprintf(err, errsz, "line %d: a GPU share (gpu_milli %lld) of %lld GPUs", c->line,
			 (long long)milli, (long long)num);
		return -1;
	}
	claim_from_task(cl, cpu, mem, (int)num, (uint32_t)milli, spec);
	return 0;
}

int sim_parse_pods(const char *text, struct sim_trace *out, char *err, size_t errsz)
{
	memset(out, 0, sizeof(*out));
	struct csv c = { .p = text };
	static const char *const names[] = { "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
					     "gpu_spec" };
	int col[5];
	if (csv_header(&c, "pod list", names, 5, 1u << 4, col, err, errsz))   /* gpu_spec optional */
		return -1;
	struct strmap shapes;
	strmap_init(&shapes);
	int cap = 0, shape_cap = 0;
	while (csv_next(&c)) {
		if (out->ntask == cap) {
			cap = cap ? cap * 2 : 1024;
			struct sim_task *v = realloc(out->tasks, (size_t)cap * sizeof(*v));
			if (!v) {
				snprintf(err, errsz, "out of memory");
				goto fail;
			}
			out->tasks = v;
		}
		struct claim cl;
		if (csv_claim(&c, col, &cl, err, errsz))
			goto fail;
		int s = shape_index(out, &shapes, &shape_cap, &cl);
		if (s < 0) {
			snprintf(err, errsz, "out of memory");
			goto fail;
		}
		struct sim_task *t = &out->tasks[out->ntask++];
		t->shape = s;
		t->gpu_milli = claim_gpu_milli(&cl);
		out->gpu_milli += t->gpu_milli;
	}
	if (!out->ntask) {
		snprintf(err, errsz, "pod list has no pods");
		goto fail;
	}
	strmap_release(&shapes);
	return 0;
fail:
	strmap_release(&shapes);
	sim_trace_release(out);
	return -1;
}

int sim_read_pods(const char *path, struct sim_trace *out, char *err, size_t errsz)
{
	memset(out, 0, sizeof(*out));
	struct buf b;
	if (slurp(path, &b, err, errsz))
		return -1;
	int rc = sim_parse_pods(buf_cstr(&b), out, err, errsz);
	buf_release(&b);
	if (rc)
		err_in(path, err, errsz);
	return rc;
}
