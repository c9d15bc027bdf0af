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
	/* chrooted into the host: the child looks the tool up after chroot() */
	const char *root = opts && !(opts->tools_dir && *opts->tools_dir) && opts->host_root && *opts->host_root
				   ? opts->host_root : NULL;
	char cand[HOST_CANDIDATES][256];
	int ncand = 0;
	char proc[300] = "";   /* root's /proc, where the tool gets one */
	struct stat rst;
	if (root && (stat(root, &rst) || !S_ISDIR(rst.st_mode))) {
		res->status = TOOLRUN_SPAWN_ERROR;
		snprintf(res->err, sizeof(res->err), "the host root %s is not a directory (is / mounted there?)", root);
		return hand_over(res, &out);
	}
	if (root) {
		int pn = snprintf(proc, sizeof(proc), "%s/proc", root);
		if (pn <= 0 || (size_t)pn >= sizeof(proc) || lstat(proc, &rst) || !S_ISDIR(rst.st_mode))
			proc[0] = '\0';
		if (strchr(argv[0], '/')) {
			snprintf(cand[ncand++], sizeof(cand[0]), "%s", argv[0]);
		} else {
			const char *p = TOOLRUN_HOST_PATH;
			while (*p && ncand < HOST_CANDIDATES) {
				size_t seg = strcspn(p, ":");
				int n = snprintf(cand[ncand], sizeof(cand[0]), "%.*s/%s", (int)seg, p, argv[0]);
				if (seg && n > 0 && (size_t)n < sizeof(cand[0]))
					ncand++;
				p += seg + (p[seg] ? 1 : 0);
			}
		}
		snprintf(res->path, sizeof(res->path), "%s:%s", root, argv[0]);
	} else if (!toolrun_find(opts ? opts->tools_dir : NULL, argv[0], res->path, sizeof(res->path))) {
		res->status = TOOLRUN_NOT_FOUND;
		res->path[0] = '\0';
		return hand_over(res, &out);
	}
	char **env = child_env();
	if (!env)
		return -1;
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, ps[2] = { -1, -1 };
	if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(ps, O_CLOEXEC)) {
		res->status = TOOLRUN_SPAWN_ERROR;
		snprintf(res->err, sizeof(res->err), "pipe: %s", strerror(errno));
		goto spawn_failed;
	}
	pid_t pid = fork();
	if (pid < 0) {
		res->status = TOOLRUN_SPAWN_ERROR;
		snprintf(res->err, sizeof(res->err), "fork: %s", strerror(errno));
		goto spawn_failed;
	}
	if (pid == 0) {
		/* child: only async-signal-safe calls from here on */
		setpgid(0, 0);
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		signal(SIGPIPE, SIG_DFL);
		int e;
		if (root) {
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
			if (proc[0] && !unshare(CLONE_NEWNS) && !mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL))
				(void)mount("/proc", proc, NULL, MS_BIND | MS_REC, NULL);
			if (chroot(root) || chdir("/")) {
				e = errno;
			} else {
				e = ENOENT;
				for (int i = 0; i < ncand; i++) {
					execve(cand[i], (char *const *)argv, env);
					if (errno != ENOENT && errno != ENOTDIR)
						e = errno;   /* there, but cannot run: say why */
				}
			}
		} else {
			execve(res->path, (char *const *)argv, env);
			e = errno;
		}
		ssize_t w = write(ps[1], &e, sizeof(e));
		(void)w;
		_exit(127);
	}
	setpgid(pid, pid);   /* also here, so the group exists before any kill */
	free(env);
	env = NULL;
	close_fd(&po[1]);
	close_fd(&pe[1]);
	close_fd(&ps[1]);

	int exec_errno = 0;
	ssize_t r;
	do {
		r = read(ps[0], &exec_errno, sizeof(exec_errno));
	} while (r < 0 && errno == EINTR);
	close_fd(&ps[0]);
	if (r == (ssize_t)sizeof(exec_errno)) {
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		res->status = exec_errno == ENOENT ? TOOLRUN_NOT_FOUND : TOOLRUN_SPAWN_ERROR;
		if (root)
			snprintf(res->err, sizeof(res->err), "run %s chrooted into %s: %s", argv[0], root,
				 strerror(exec_errno));
		else
			snprintf(res->err, sizeof(res->err), "exec %s: %s", res->path, strerror(exec_errno));
		close_fd(&po[0]);
		close_fd(&pe[0]);
		res->elapsed_ms = clock_mono_ms() - start;
		return hand_over(res, &out);
	}

	fcntl(po[0], F_SETFL, fcntl(po[0], F_GETFL) | O_NONBLOCK);
	fcntl(pe[0], F_SETFL, fcntl(pe[0], F_GETFL) | O_NONBLOCK);
	int64_t deadline = start + timeout_ms;
	size_t errlen = 0;
	bool too_big = false, timed_out = false, reaped = false;
	int wstatus = 0;
	int64_t exited_at = 0;
	while (po[0] >= 0 || pe[0] >= 0) {
		int64_t now = clock_mono_ms();
		if (now >= deadline) {
			timed_out = true;
			break;
		}
		if (!reaped) {
			pid_t w = waitpid(pid, &wstatus, WNOHANG);
			if (w == pid) {
				reaped = true;
				exited_at = now;
			}
		}
		if (reaped && now - exited_at > EXITED_GRACE_MS)
			break;   /* something it left behind holds the pipes */
		struct pollfd pfd[2];
		int nfd = 0;
		if (po[0] >= 0)
			pfd[nfd++] = (struct pollfd){ .fd = po[0], .events = POLLIN };
		if (pe[0] >= 0)
			pfd[nfd++] = (struct pollfd){ .fd = pe[0], .events = POLLIN };
		int64_t wait = deadline - now;
		if (wait > 50)
			wait = 50;
		int pr = poll(pfd, (nfds_t)nfd, (int)wait);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr <= 0)
			continue;
		for (int i = 0; i < nfd; i++) {
			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			bool is_out = pfd[i].fd == po[0];
			bool open_ = drain(pfd[i].fd, is_out ? &out : NULL, res->err, &errlen, &too_big);
			if (!open_)
				close_fd(is_out ? &po[0] : &pe[0]);
		}
		if (too_big)
			break;
	}
	if (timed_out || too_big || po[0] >= 0 || pe[0] >= 0) {
		kill(-pid, SIGKILL);
	}
	close_fd(&po[0]);
	close_fd(&pe[0]);
	if (!reaped) {
		while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
			;
	}
	if (timed_out || too_big)
		reap_group(pid);
	res->elapsed_ms = clock_mono_ms() - start;
	if (timed_out) {
		res->status = TOOLRUN_TIMEOUT;
	} else if (too_big) {
		res->status = TOOLRUN_TOO_BIG;
	} else if (WIFEXITED(wstatus)) {
		res->exit_code = WEXITSTATUS(wstatus);
		res->status = res->exit_code ? TOOLRUN_EXIT_NONZERO : TOOLRUN_OK;
	} else if (WIFSIGNALED(wstatus)) {
		res->signal = WTERMSIG(wstatus);
		res->status = TOOLRUN_SIGNALED;
	} else {
		res->status = TOOLRUN_SPAWN_ERROR;
	}
	return hand_over(res, &out);

spawn_failed:
	free(env);
	close_fd(&po[0]);
	close_fd(&po[1]);
	close_fd(&pe[0]);
	close_fd(&pe[1]);
	close_fd(&ps[0]);
	close_fd(&ps[1]);
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
