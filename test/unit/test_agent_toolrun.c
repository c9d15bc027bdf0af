/* The tool runner: argv without a shell, timeouts that kill the process group, caps, statuses. */
#include "test_agent_util.h"

#include "agent_toolrun.h"
#include "strnum.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

static void test_runs_and_captures(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	ta_script(dir, "tool", "printf 'a b\\n'; printf '%%s|' \"$@\"; echo; echo warn >&2\n");
	struct toolrun_opts o = { .tools_dir = dir, .timeout_ms = 5000 };
	/* arguments go through as they are: no shell splits or expands them */
	const char *argv[] = { "tool", "--query-gpu=index,name", "two words", "$HOME", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_OK);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "a b\n--query-gpu=index,name|two words|$HOME|\n");
	assert_int_equal(r.out_len, strlen(r.out));
	assert_string_equal(r.err, "warn\n");
	toolrun_result_release(&r);
	ta_rmdir(dir);
}

static void test_exit_status_and_describe(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	/* what nvidia-smi prints, and its status, when the driver is not loaded */
	char fix[1024];
	ta_script(dir, "tool", "cat '%s'; exit 9\n", ta_abs(fix, sizeof(fix), "broken/nvidia-smi-no-driver.txt"));
	struct toolrun_opts o = { .tools_dir = dir, .timeout_ms = 5000 };
	const char *argv[] = { "tool", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_EXIT_NONZERO);
	assert_int_equal(r.exit_code, 9);
	char d[512];
	toolrun_describe(&r, "nvidia-smi", d, sizeof(d));
	assert_string_equal(d, "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't "
			       "communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver "
			       "is installed and running.");
	toolrun_result_release(&r);
	ta_rmdir(dir);
}

/* Running (a zombie waiting for a reaper that does not come counts as gone). */
static bool alive(pid_t pid)
{
	if (kill(pid, 0) != 0)
		return false;
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *close = strrchr(buf, ')');
	return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

static void test_timeout_kills_the_group(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	char pidfile[1100];
	snprintf(pidfile, sizeof(pidfile), "%s/pidfile", dir);
	/* a tool that hangs, with a child of its own that would outlive a plain kill */
	ta_script(dir, "hang", "sleep 60 & echo $! > '%s'; echo partial; sleep 60\n", pidfile);
	struct toolrun_opts o = { .tools_dir = dir, .timeout_ms = 300 };
	const char *argv[] = { "hang", NULL };
	struct toolrun_result r;
	time_t t0 = time(NULL);
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_true(time(NULL) - t0 < 5);
	assert_int_equal(r.status, TOOLRUN_TIMEOUT);
	assert_true(r.elapsed_ms >= 300);
	char d[256];
	toolrun_describe(&r, "nvidia-smi", d, sizeof(d));
	assert_non_null(strstr(d, "nvidia-smi timed out after"));
	toolrun_result_release(&r);
	FILE *f = fopen(pidfile, "r");
	assert_non_null(f);
	char line[32] = "";
	assert_non_null(fgets(line, sizeof(line), f));
	fclose(f);
	line[strcspn(line, "\n")] = '\0';
	int pid = 0;
	assert_true(strnum_int(line, 1, 1 << 30, &pid));
	/* the background sleep was in the tool's process group: gone too */
	for (int i = 0; i < 50 && alive(pid); i++) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	assert_false(alive(pid));
	ta_rmdir(dir);
}

static void test_not_found(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	struct toolrun_opts o = { .tools_dir = dir };
	const char *argv[] = { "rocm-smi", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_NOT_FOUND);
	assert_string_equal(r.out, "");
	toolrun_result_release(&r);
	/* not executable counts as not there */
	ta_script(dir, "tool", "echo hi\n");
	char path[1100];
	snprintf(path, sizeof(path), "%s/tool", dir);
	assert_int_equal(chmod(path, 0644), 0);
	const char *argv2[] = { "tool", NULL };
	assert_int_equal(toolrun_run(&o, argv2, &r), 0);
	assert_int_equal(r.status, TOOLRUN_NOT_FOUND);
	toolrun_result_release(&r);
	/* and via PATH */
	struct toolrun_opts p = { 0 };
	const char *argv3[] = { "no-such-gpu-tool-anywhere", NULL };
	assert_int_equal(toolrun_run(&p, argv3, &r), 0);
	assert_int_equal(r.status, TOOLRUN_NOT_FOUND);
	toolrun_result_release(&r);
	ta_rmdir(dir);
}

static void test_output_cap(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	ta_script(dir, "big", "yes 'GPU 0: NVIDIA H100 80GB HBM3'\n");
	struct toolrun_opts o = { .tools_dir = dir, .timeout_ms = 5000, .out_cap = 64 * 1024 };
	const char *argv[] = { "big", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_TOO_BIG);
	assert_true(r.out_len <= 64 * 1024);
	toolrun_result_release(&r);
	ta_rmdir(dir);
}

static void test_signal_and_stderr_cap(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	ta_script(dir, "tool", "yes error | head -c 100000 >&2; kill -SEGV $$\n");
	struct toolrun_opts o = { .tools_dir = dir, .timeout_ms = 5000 };
	const char *argv[] = { "tool", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_SIGNALED);
	assert_int_equal(r.signal, SIGSEGV);
	assert_int_equal(strlen(r.err), TOOLRUN_ERR_MAX - 1);
	char d[256];
	toolrun_describe(&r, "rocminfo", d, sizeof(d));
	assert_non_null(strstr(d, "rocminfo was killed by signal 11"));
	toolrun_result_release(&r);
	ta_rmdir(dir);
}

static void test_environment(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	ta_script(dir, "tool", "echo \"$LC_ALL\"\n");
	setenv("LC_ALL", "de_DE.UTF-8", 1);
	struct toolrun_opts o = { .tools_dir = dir };
	const char *argv[] = { "tool", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_string_equal(r.out, "C\n");
	toolrun_result_release(&r);
	unsetenv("LC_ALL");
	ta_rmdir(dir);
}

/* --host-root: the tool comes from the host's directories and runs chrooted there. */
static void test_host_root(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	char *old_path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
	setenv("PATH", dir, 1);   /* the agent's own PATH plays no part */
	struct toolrun_opts o = { .host_root = "/", .timeout_ms = 5000 };
	const char *argv[] = { "echo", "from the host", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	if (geteuid() == 0) {
		assert_int_equal(r.status, TOOLRUN_OK);
		assert_string_equal(r.out, "from the host\n");
		assert_non_null(strstr(r.path, "echo"));
	} else {
		/* no CAP_SYS_CHROOT: a spawn error that says so, not "absent" */
		assert_int_equal(r.status, TOOLRUN_SPAWN_ERROR);
		assert_non_null(strstr(r.err, "chrooted into /"));
	}
	toolrun_result_release(&r);
	if (geteuid() == 0) {
		/* absent on the host: not installed, as without --host-root */
		const char *argv2[] = { "no-such-gpu-tool-anywhere", NULL };
		assert_int_equal(toolrun_run(&o, argv2, &r), 0);
		assert_int_equal(r.status, TOOLRUN_NOT_FOUND);
		toolrun_result_release(&r);
	}
	/* --tools-dir wins over --host-root */
	ta_script(dir, "tool", "echo from tools-dir\n");
	struct toolrun_opts both = { .tools_dir = dir, .host_root = "/nonexistent", .timeout_ms = 5000 };
	const char *argv3[] = { "tool", NULL };
	assert_int_equal(toolrun_run(&both, argv3, &r), 0);
	assert_int_equal(r.status, TOOLRUN_OK);
	assert_string_equal(r.out, "from tools-dir\n");
	toolrun_result_release(&r);
	/* a host root that is not there: an error with the reason */
	struct toolrun_opts bad = { .host_root = "/nonexistent-host-root", .timeout_ms = 5000 };
	assert_int_equal(toolrun_run(&bad, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_SPAWN_ERROR);
	assert_non_null(strstr(r.err, "/nonexistent-host-root"));
	toolrun_result_release(&r);
	if (old_path) {
		setenv("PATH", old_path, 1);
		free(old_path);
	}
	ta_rmdir(dir);
}

/* Whether this process may make a mount namespace (root with CAP_SYS_ADMIN). */
static bool can_unshare_mounts(void)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(unshare(CLONE_NEWNS) ? 1 : 0);
	int st;
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static bool copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY), outfd = open(to, O_WRONLY | O_CREAT | O_TRUNC, mode);
	char buf[65536];
	ssize_t n = 0;
	bool ok = in >= 0 && outfd >= 0;
	while (ok && (n = read(in, buf, sizeof(buf))) > 0)
		ok = write(outfd, buf, (size_t)n) == n;
	ok = ok && n == 0;
	if (in >= 0)
		close(in);
	if (outfd >= 0)
		close(outfd);
	return ok;
}

/* Entries of a directory other than . and .. (-1: cannot read it). */
static int dir_entries(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/*
 * --host-root without the host's /proc (the DaemonSet does not mount it):
 * the tool gets this process's /proc there, in a mount namespace of its own,
 * and the agent's view of the host root does not change.
 */
static void test_host_root_proc(void **state)
{
	(void)state;
	/* a host root holding only a static busybox and an empty proc */
	if (geteuid() != 0 || access("/bin/busybox", X_OK) || !can_unshare_mounts())
		skip();
	char *dir = ta_tmpdir();
	char bin[1024], bb[1024], proc[1024];
	snprintf(bin, sizeof(bin), "%s/bin", dir);
	snprintf(bb, sizeof(bb), "%s/bin/busybox", dir);
	snprintf(proc, sizeof(proc), "%s/proc", dir);
	assert_int_equal(mkdir(bin, 0755), 0);
	assert_int_equal(mkdir(proc, 0755), 0);
	assert_true(copy_file("/bin/busybox", bb, 0755));
	struct toolrun_opts o = { .host_root = dir, .timeout_ms = 5000 };
	const char *argv[] = { "/bin/busybox", "cat", "/proc/self/stat", NULL };
	struct toolrun_result r;
	assert_int_equal(toolrun_run(&o, argv, &r), 0);
	assert_int_equal(r.status, TOOLRUN_OK);
	assert_non_null(strstr(r.out, "(busybox)"));   /* the tool's own /proc/self */
	toolrun_result_release(&r);
	/* nothing stays mounted in the agent's view (else rmdir below would fail) */
	assert_int_equal(dir_entries(proc), 0);
	/* a host root without a proc directory: the tool runs all the same */
	assert_int_equal(rmdir(proc), 0);
	const char *argv2[] = { "/bin/busybox", "echo", "no proc", NULL };
	assert_int_equal(toolrun_run(&o, argv2, &r), 0);
	assert_int_equal(r.status, TOOLRUN_OK);
	assert_string_equal(r.out, "no proc\n");
	toolrun_result_release(&r);
	assert_int_equal(unlink(bb), 0);
	assert_int_equal(rmdir(bin), 0);
	ta_rmdir(dir);
}

int main(void)
{
	/* as gpu-agent does: the tools' orphans come to us and toolrun reaps them */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runs_and_captures),
		cmocka_unit_test(test_exit_status_and_describe),
		cmocka_unit_test(test_timeout_kills_the_group),
		cmocka_unit_test(test_not_found),
		cmocka_unit_test(test_output_cap),
		cmocka_unit_test(test_signal_and_stderr_cap),
		cmocka_unit_test(test_environment),
		cmocka_unit_test(test_host_root),
		cmocka_unit_test(test_host_root_proc),
	};
	return cmocka_run_group_tests_name("agent_toolrun", tests, NULL, NULL);
}
