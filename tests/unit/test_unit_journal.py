"""unit_journal: a unit's journal read by journald's structured fields
(journalctl -o json: MESSAGE_ID, EXIT_CODE, UNIT_RESULT), whatever its
words, and the kernel's OOM kills of the unit's cgroup; on real captures
(tests/fixtures/lab/SOURCES.md)."""

from __future__ import annotations

from conftest import FIXTURES

from ansible.module_utils.node.unit_journal import (PROCESS_EXIT_ID, UNIT_FAILED_ID, kernel_oom_of, messages, parse_records,
                          record_failures, unit_failures)

LAB = FIXTURES / "lab"
KILLED = (LAB / "journal_json_u_oomprobe_memcg_killed_cgroup_v1_lab.jsonl").read_text()
DMESG = (LAB / "dmesg_memcg_oom_kill_oomprobe_unit_lab.txt").read_text()


def test_a_killed_process_is_read_by_its_records_ids_and_fields():
    records = parse_records(KILLED)
    assert [r["MESSAGE_ID"] for r in records] == [PROCESS_EXIT_ID, UNIT_FAILED_ID]
    assert record_failures(records) == ["oomprobe.service: Main process exited, code=killed, status=9/KILL",
                                        "oomprobe.service: Failed with result 'signal'."]
    # the text reader takes the same JSON and reads it by its records
    assert unit_failures(KILLED) == record_failures(records)


def test_the_ids_decide_not_the_words():
    """A systemd that words its messages otherwise (another version, a
    translation) is still read: the records' ids and fields say it."""
    records = parse_records(KILLED)
    for record in records:
        record["MESSAGE"] = "Hauptprozess beendet"  # not systemd's English
    assert len(record_failures(records)) == 2
    clean = [dict(r, EXIT_CODE="exited", EXIT_STATUS="0") for r in records[:1]]
    assert record_failures(clean) == []  # a process that exited 0 is no failure


def test_the_kernels_oom_kill_of_the_units_cgroup_is_a_failure():
    """The kernel's lines as journald keeps them (_TRANSPORT=kernel, one
    record a line of the real dmesg capture): the oom-kill line names the
    unit's cgroup, the kill line after it is the unit's; another unit's is not."""
    lines = [line.split("] ", 1)[1] for line in DMESG.splitlines()]
    records = [{"_TRANSPORT": "kernel", "MESSAGE": line} for line in lines]
    ours = [r for r in records if kernel_oom_of(r, records, "oomprobe.service")]
    assert [r["MESSAGE"].split(":", 1)[0] for r in ours] == ["oom-kill", "Memory cgroup out of memory"]
    assert not [r for r in records if kernel_oom_of(r, records, "twinrail-llama.service")]
    assert record_failures(ours) == ["kernel: Memory cgroup out of memory: Killed process 27626 (python3)"]
    # pasted as text (dmesg), the kill line is read too
    assert unit_failures(DMESG) == ["[28545.933516] Memory cgroup out of memory: Killed process 27626 (python3) "
                                    "total-vm:81432kB, anon-rss:65280kB, file-rss:8476kB, shmem-rss:0kB, UID:0 "
                                    "pgtables:204kB oom_score_adj:0"]
    assert messages(ours).count("\n") == 1


HEALTH = FIXTURES / "gpu-health"


def test_systemds_oom_kill_of_a_unit_is_a_failure_where_its_process_exited_1():
    """The OOM killer took a process of the unit; its main process then
    exited 1 and the unit ended 'oom-kill' (a real systemctl/journal capture)."""
    failures = unit_failures((HEALTH / "systemctl_status_journal_unit_oom_kill_systemd_run_neevink.txt").read_text())
    assert [f.split("highload-stress-test.service: ", 1)[1] for f in failures] == [
        "A process of this unit has been killed by the OOM killer.",
        "Main process exited, code=exited, status=1/FAILURE", "Failed with result 'oom-kill'."]


def test_the_kernels_kill_lines_and_systemds_oom_line_in_syslog_are_read():
    failures = unit_failures((HEALTH / "var_log_messages_memcg_oom_docker_scope_unit_oom_sparrc.txt").read_text())
    assert len(failures) == 2
    assert "kernel: Memory cgroup out of memory: Killed process 51947 (tail)" in failures[0]
    assert failures[1].endswith(".scope: A process of this unit has been killed by the OOM killer.")
    # two global OOM kills in dmesg, each read once (the oom-kill lines name a session scope, no unit of ours)
    text = (HEALTH / "dmesg_oom_killed_process_global_oom_session_scope_shinode.txt").read_text()
    assert [f.split("] ", 1)[1][:55] for f in unit_failures(text)] == [
        "Out of memory: Killed process 3390463 (stateless-histo)", "Out of memory: Killed process 3477330 (stateless-histo)"]
    records = [{"_TRANSPORT": "kernel", "MESSAGE": line.split("] ", 1)[1]} for line in text.splitlines()]
    assert not [r for r in records if kernel_oom_of(r, records, "twinrail-llama.service")]


def test_a_start_time_journalctl_cannot_parse_falls_back_to_the_units_own_records():
    """journalctl refusing the --since (an older systemd, an odd time zone)
    must not read as an unreadable journal: the unit's records are read alone."""
    from ansible.module_utils.node.unit_journal import since_start
    calls = []

    class Module:
        def get_bin_path(self, name, *_a, **_k):
            return name

        def run_command(self, argv, **_kw):
            calls.append(argv)
            if argv[0] == "systemctl":
                return 0, "InvocationID=d1c6\nInactiveExitTimestamp=Sat 2026-12-05 23:13:14 XYZT\n", ""
            if "--since" in argv:
                return 1, "", 'Failed to parse timestamp: Sat 2026-12-05 23:13:14 XYZT'
            return 0, KILLED, ""

    journal = since_start(Module(), "oomprobe.service")
    assert journal.rc == 0 and len(journal.records) == 2
    assert calls[-1][-3:] == ["_SYSTEMD_INVOCATION_ID=d1c6", "+", "INVOCATION_ID=d1c6"]
