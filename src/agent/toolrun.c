/*
 * toolrun: run a vendor tool with an argv (no shell), a timeout that kills
 * its whole process group, a cap on the output kept, and one status.
 */
#include "agent_toolrun.h"

#include "buf.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_OUT_CAP (8u << 20)
#define EXITED_GRACE_MS 200      /* pipes still open after the tool exited */
#define HOST_CANDIDATES 12       /* directories of TOOLRUN_HOST_PATH */

static bool executable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

bool toolrun_find(const char *tools_dir, const char *tool, char *buf, size_t len)
{
	if (!tool || !*tool || !len)
		return false;
	if (strchr(tool, '/')) {
		int n = snprintf(buf, len, "%s", tool);
		return n > 0 && (size_t)n < len && executable(buf);
	}
	if (tools_dir && *tools_dir) {
		int n = snprintf(buf, len, "%s/%s", tools_dir, tool);
		return n > 0 && (size_t)n < len && executable(buf);
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	const char *p = path;
	for (;;) {
		size_t seg = strcspn(p, ":");
		int n = seg ? snprintf(buf, len, "%.*s/%s", (int)seg, p, tool)
			    : snprintf(buf, len, "./%s", tool);
		if (n > 0 && (size_t)n < len && executable(buf))
			return true;
		if (!p[seg])
			break;
		p += seg + 1;
	}
	return false;
}

/* environ with LC_ALL=C in place of any LC_ALL, for stable number formats. */
static char **child_env(void)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **env = calloc(n + 2, sizeof(*env));
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "LC_ALL=", 7))
			env[k++] = environ[i];
	}
	env[k++] = (char *)"LC_ALL=C";
	env[k] = NULL;
	return env;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/*
 * Reads what is there; returns false at EOF or on a read error. Once stdout
 * passes its cap (or memory runs out) *too_big is set and the rest of it is
 * dropped.
 */
static bool drain(int fd, struct buf *out, char *err, size_t *errlen, bool *too_big)
{
	char chunk[8192];
	for (;;) {
		ssize_t r = read(fd, chunk, sizeof(chunk));
		if (r > 0) {
			if (out) {
				if (!*too_big && buf_add(out, chunk, (size_t)r))
					*too_big = true;
			} else {
				size_t room = TOOLRUN_ERR_MAX - 1 - *errlen;
				size_t k = (size_t)r < room ? (size_t)r : room;
				memcpy(err + *errlen, chunk, k);
				*errlen += k;
				err[*errlen] = '\0';
			}
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		return false;
	}
}

/*
 * Reaps what is left of a killed process group: members the tool started
 * were orphaned when the tool died, and come to us if we are their child
 * subreaper (gpu-agent sets PR_SET_CHILD_SUBREAPER); without that they go to
 * init and this finds nothing to wait for.
 */
static void reap_group(pid_t pgid)
{
	for (int i = 0; i < 40; i++) {
		pid_t r = waitpid(-pgid, NULL, WNOHANG);
		if (r > 0)
			continue;
		if (r < 0)
			return;   /* ECHILD: nothing of that group is ours */
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Hands stdout ("" when none) to res: 0, or -1 when not even that could be allocated. */
static int hand_over(struct toolrun_result *res, struct buf *out)
{
	res->out = buf_detach(out, &res->out_len);
	return res->out ? 0 : -1;
}

/* One run of a tool: where it is, and the child with its three pipes (stdout, stderr, exec status). */
struct spawn {
	const char *root;                    /* chrooted into the host: the child looks the tool up after chroot() */
	char cand[HOST_CANDIDATES][256];     /* with root: where to look */
	int ncand;
	char proc[300];                      /* root's /proc, where the tool gets one; "" none */
	char **env;
	int po[2], pe[2], ps[2];
	pid_t pid;
};

/* With root: the candidate paths in the host's bin directories, and its /proc. */
static void host_candidates(struct spawn *sp, const char *tool)
{
	struct stat rst;
	int pn = snprintf(sp->proc, sizeof(sp->proc), "%s/proc", sp->root);
	if (pn <= 0 || (size_t)pn >= sizeof(sp->proc) || lstat(sp->proc, &rst) || !S_ISDIR(rst.st_mode))
		sp->proc[0] = '\0';
	if (strchr(tool, '/')) {
		snprintf(sp->cand[sp->ncand++], sizeof(sp->cand[0]), "%s", tool);
		return;
	}
	const char *p = TOOLRUN_HOST_PATH;
	while (*p && sp->ncand < HOST_CANDIDATES) {
		size_t seg = strcspn(p, ":");
		int n = snprintf(sp->cand[sp->ncand], sizeof(sp->cand[0]), "%.*s/%s", (int)seg, p, tool);
		if (seg && n > 0 && (size_t)n < sizeof(sp->cand[0]))
			sp->ncand++;
		p += seg + (p[seg] ? 1 : 0);
	}
}

/* Where the tool is (res->path); false with res's status set when it cannot be run. */
static bool locate(const struct toolrun_opts *opts, const char *tool, struct spawn *sp, struct toolrun_result *res)
{
	sp->root = opts && !(opts->tools_dir && *opts->tools_dir) && opts->host_root && *opts->host_root
			   ? opts->host_root : NULL;
	struct stat rst;
	if (sp->root && (stat(sp->root, &rst) || !S_ISDIR(rst.st_mode))) {
		res->status = TOOLRUN_SPAWN_ERROR;
		snprintf(res->err, sizeof(res->err), "the host root %s is not a directory (is / mounted there?)",
			 sp->root);
		return false;
	}
	if (sp->root) {
		host_candidates(sp, tool);
		snprintf(res->path, sizeof(res->path), "%s:%s", sp->root, tool);
		return true;
	}
	if (toolrun_find(opts ? opts->tools_dir : NULL, tool, res->path, sizeof(res->path)))
		return true;
	res->status = TOOLRUN_NOT_FOUND;
	res->path[0] = '\0';
	return false;
}

/* The child: only async-signal-safe calls. Sends exec's errno on ps when it fails. */
static _Noreturn void child_exec(const struct spawn *sp, const char *const argv[], const char *path)
{
	setpgid(0, 0);
	int devnull = open("/dev/null", O_RDONLY);
	if (devnull >= 0)
		dup2(devnull, 0);
	dup2(sp->po[1], 1);
	dup2(sp->pe[1], 2);
	signal(SIGPIPE, SIG_DFL);
	int e;
	if (sp->root) {
		/*
		 * The DaemonSet mounts the host's directories the tools need
		 * under root, but not the host's /proc (that would show the
		 * host's processes and, through /proc/1/root, all of its
		 * files). The tools still read /proc: the loader resolves
		 * $ORIGIN (ROCm's RUNPATH) through /proc/self/exe, NVML reads
		 * /proc/devices (MIG) and /proc/self. So the tool gets this
		 * container's /proc there, in a mount namespace of its own that
		 * ends with it (the agent's view does not change). Best
		 * effort: without CAP_SYS_ADMIN it runs without a /proc.
		 */
		if (sp->proc[0] && !unshare(CLONE_NEWNS) && !mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL))
			(void)mount("/proc", sp->proc, NULL, MS_BIND | MS_REC, NULL);
		if (chroot(sp->root) || chdir("/")) {
			e = errno;
		} else {
			e = ENOENT;
			for (int i = 0; i < sp->ncand; i++) {
				execve(sp->cand[i], (char *const *)argv, sp->env);
				if (errno != ENOENT && errno != ENOTDIR)
					e = errno;   /* there, but cannot run: say why */
			}
		}
	} else {
		execve(path, (char *const *)argv, sp->env);
		e = errno;
	}
	ssize_t w = write(sp->ps[1], &e, sizeof(e));
	(void)w;
	_exit(127);
}

static void spawn_close(struct spawn *sp)
{
	free(sp->env);
	sp->env = NULL;
	for (int i = 0; i < 2; i++) {
		close_fd(&sp->po[i]);
		close_fd(&sp->pe[i]);
		close_fd(&sp->ps[i]);
	}
}

/* Starts the tool; false with res's status and err set when it did not start (the child is reaped). */
static bool spawn_tool(struct spawn *sp, const char *const argv[], struct toolrun_result *res)
{
	res->status = TOOLRUN_SPAWN_ERROR;
	if (pipe2(sp->po, O_CLOEXEC) || pipe2(sp->pe, O_CLOEXEC) || pipe2(sp->ps, O_CLOEXEC)) {
		snprintf(res->err, sizeof(res->err), "pipe: %s", strerror(errno));
		return false;
	}
	sp->pid = fork();
	if (sp->pid < 0) {
		snprintf(res->err, sizeof(res->err), "fork: %s", strerror(errno));
		return false;
	}
	if (sp->pid == 0)
		child_exec(sp, argv, res->path);
	setpgid(sp->pid, sp->pid);   /* also here, so the group exists before any kill */
	free(sp->env);
	sp->env = NULL;
	close_fd(&sp->po[1]);
	close_fd(&sp->pe[1]);
	close_fd(&sp->ps[1]);
	int exec_errno = 0;
	ssize_t r;
	do {
		r = read(sp->ps[0], &exec_errno, sizeof(exec_errno));
	} while (r < 0 && errno == EINTR);
	close_fd(&sp->ps[0]);
	if (r != (ssize_t)sizeof(exec_errno))
		return true;   /* exec closed the pipe: the tool runs */
	int st;
	while (waitpid(sp->pid, &st, 0) < 0 && errno == EINTR)
		;
	res->status = exec_errno == ENOENT ? TOOLRUN_NOT_FOUND : TOOLRUN_SPAWN_ERROR;
	if (sp->root)
		snprintf(res->err, sizeof(res->err), "run %s chrooted into %s: %s", argv[0], sp->root,
			 strerror(exec_errno));
	else
		snprintf(res->err, sizeof(res->err), "exec %s: %s", res->path, strerror(exec_errno));
	return false;
}

/* How reading a running tool ended. */
struct collected {
	bool too_big, timed_out, reaped;
	int wstatus;
};

/* Reads stdout (into out) and stderr (into res->err) until both close, the deadline, or too much. */
static void collect(struct spawn *sp, int64_t deadline, struct buf *out, struct toolrun_result *res,
		    struct collected *c)
{
	fcntl(sp->po[0], F_SETFL, fcntl(sp->po[0], F_GETFL) | O_NONBLOCK);
	fcntl(sp->pe[0], F_SETFL, fcntl(sp->pe[0], F_GETFL) | O_NONBLOCK);
	size_t errlen = 0;
	int64_t exited_at = 0;
	while (sp->po[0] >= 0 || sp->pe[0] >= 0) {
		int64_t now = clock_mono_ms();
		if (now >= deadline) {
			c->timed_out = true;
			return;
		}
		if (!c->reaped && waitpid(sp->pid, &c->wstatus, WNOHANG) == sp->pid) {
			c->reaped = true;
			exited_at = now;
		}
		if (c->reaped && now - exited_at > EXITED_GRACE_MS)
			return;   /* something it left behind holds the pipes */
		struct pollfd pfd[2];
		int nfd = 0;
		if (sp->po[0] >= 0)
			pfd[nfd++] = (struct pollfd){ .fd = sp->po[0], .events = POLLIN };
		if (sp->pe[0] >= 0)
			pfd[nfd++] = (struct pollfd){ .fd = sp->pe[0], .events = POLLIN };
		int64_t wait = deadline - now;
		int pr = poll(pfd, (nfds_t)nfd, (int)(wait > 50 ? 50 : wait));
		if (pr < 0 && errno != EINTR)
			return;
		for (int i = 0; i < nfd && pr > 0; i++) {
			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			bool is_out = pfd[i].fd == sp->po[0];
			if (!drain(pfd[i].fd, is_out ? out : NULL, res->err, &errlen, &c->too_big))
				close_fd(is_out ? &sp->po[0] : &sp->pe[0]);
		}
		if (c->too_big)
			return;
	}
}

/* Kills what is left when reading stopped early, reaps the tool, and says how it ended. */
static void finish(struct spawn *sp, struct collected *c, struct toolrun_result *res)
{
	if (c->timed_out || c->too_big || sp->po[0] >= 0 || sp->pe[0] >= 0)
		kill(-sp->pid, SIGKILL);
	close_fd(&sp->po[0]);
	close_fd(&sp->pe[0]);
	if (!c->reaped) {
		while (waitpid(sp->pid, &c->wstatus, 0) < 0 && errno == EINTR)
			;
	}
	if (c->timed_out || c->too_big)
		reap_group(sp->pid);
	if (c->timed_out) {
		res->status = TOOLRUN_TIMEOUT;
	} else if (c->too_big) {
		res->status = TOOLRUN_TOO_BIG;
	} else if (WIFEXITED(c->wstatus)) {
		res->exit_code = WEXITSTATUS(c->wstatus);
		res->status = res->exit_code ? TOOLRUN_EXIT_NONZERO : TOOLRUN_OK;
	} else if (WIFSIGNALED(c->wstatus)) {
		res->signal = WTERMSIG(c->wstatus);
		res->status = TOOLRUN_SIGNALED;
	} else {
		res->status = TOOLRUN_SPAWN_ERROR;
	}
}

int toolrun_run(const struct toolrun_opts *opts, const char *const argv[], struct toolrun_result *res)
{
	memset(res, 0, sizeof(*res));
	res->exit_code = -1;
	int64_t start = clock_mono_ms();
	int timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
	struct buf out;
	buf_init(&out, opts && opts->out_cap ? opts->out_cap : DEFAULT_OUT_CAP);
	if (!argv || !argv[0]) {
		res->status = TOOLRUN_SPAWN_ERROR;
		snprintf(res->err, sizeof(res->err), "empty argv");
		return hand_over(res, &out);
	}
	struct spawn sp = { .po = { -1, -1 }, .pe = { -1, -1 }, .ps = { -1, -1 } };
	if (!locate(opts, argv[0], &sp, res))
		return hand_over(res, &out);
	if (!(sp.env = child_env()))
		return -1;
	if (spawn_tool(&sp, argv, res)) {
		struct collected c = { 0 };
		collect(&sp, start + timeout_ms, &out, res, &c);
		finish(&sp, &c, res);
	}
	spawn_close(&sp);
	res->elapsed_ms = clock_mono_ms() - start;
	return hand_over(res, &out);
}

void toolrun_result_release(struct toolrun_result *res)
{
	free(res->out);
	res->out = NULL;
	res->out_len = 0;
}

int toolrun_capture(const struct toolrun_opts *opts, const char *const argv[], char **out,
		    char *err, size_t errlen)
{
	struct toolrun_result res;
	*out = NULL;
	if (toolrun_run(opts, argv, &res)) {
		snprintf(err, errlen, "%s: out of memory", argv[0]);
		return -1;
	}
	if (res.status == TOOLRUN_NOT_FOUND) {
		toolrun_result_release(&res);
		return 0;
	}
	if (res.status != TOOLRUN_OK) {
		toolrun_describe(&res, argv[0], err, errlen);
		toolrun_result_release(&res);
		return -1;
	}
	*out = res.out;
	return 1;
}

/* The first non-blank line of s, cut to fit, into buf. */
static void first_line(const char *s, char *buf, size_t len)
{
	buf[0] = '\0';
	while (s && *s) {
		while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
			s++;
		size_t n = strcspn(s, "\r\n");
		if (n) {
			if (n >= len)
				n = len - 1;
			memcpy(buf, s, n);
			buf[n] = '\0';
			/* no control bytes in a log line */
			for (char *c = buf; *c; c++) {
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					*c = '?';
			}
			return;
		}
		s += n;
	}
}

void toolrun_describe(const struct toolrun_result *res, const char *tool, char *buf, size_t len)
{
	char what[96];
	switch (res->status) {
	case TOOLRUN_OK:
		snprintf(what, sizeof(what), "exited with status 0");
		break;
	case TOOLRUN_EXIT_NONZERO:
		snprintf(what, sizeof(what), "exited with status %d", res->exit_code);
		break;
	case TOOLRUN_SIGNALED:
		snprintf(what, sizeof(what), "was killed by signal %d (%s)", res->signal,
			 strsignal(res->signal));
		break;
	case TOOLRUN_TIMEOUT:
		snprintf(what, sizeof(what), "timed out after %ld ms and was killed", res->elapsed_ms);
		break;
	case TOOLRUN_TOO_BIG:
		snprintf(what, sizeof(what), "printed more output than the agent keeps and was killed");
		break;
	case TOOLRUN_NOT_FOUND:
		snprintf(what, sizeof(what), "is not installed");
		break;
	case TOOLRUN_SPAWN_ERROR:
		snprintf(what, sizeof(what), "could not be started");
		break;
	}
	char detail[200];
	first_line(res->err, detail, sizeof(detail));
	if (!detail[0] && res->status != TOOLRUN_OK && res->status != TOOLRUN_TIMEOUT &&
	    res->status != TOOLRUN_TOO_BIG)
		first_line(res->out, detail, sizeof(detail));
	if (detail[0])
		snprintf(buf, len, "%s %s: %s", tool, what, detail);
	else
		snprintf(buf, len, "%s %s", tool, what);
}
