use super::*;
use std::io::Write;

#[test]
fn rolls_keeping_three() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s.log");
    for i in 0..5 {
        let mut f = open_append(&p).unwrap();
        f.write_all(format!("gen {i}\n").repeat(10).as_bytes())
            .unwrap();
        drop(f);
        roll(&p, 20, 3);
    }
    assert!(!p.exists());
    assert!(
        std::fs::read_to_string(generation(&p, 1))
            .unwrap()
            .starts_with("gen 4")
    );
    assert!(
        std::fs::read_to_string(generation(&p, 3))
            .unwrap()
            .starts_with("gen 2")
    );
    assert!(!generation(&p, 4).exists());
}

#[test]
fn a_log_file_rolls_by_size_and_follows_its_name_after_a_rename() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("web.log");
    let mut log = LogFile::open(&p, 100, 3).unwrap();
    log.write_all(b"before the move\n").unwrap();
    // logrotate's `create` mode: rename the file away.
    std::fs::rename(&p, generation(&p, 1)).unwrap();
    std::thread::sleep(NAME_CHECK);
    log.write_all(b"after the move\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "after the move\n");
    assert_eq!(
        std::fs::read_to_string(generation(&p, 1)).unwrap(),
        "before the move\n"
    );
    // Deleted: the same.
    std::fs::remove_file(&p).unwrap();
    std::thread::sleep(NAME_CHECK);
    log.write_all(b"after the delete\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "after the delete\n");
    // Size: rolled while written, never above max + one write.
    for i in 0..50 {
        log.write_all(format!("line {i:02} of a chatty service\n").as_bytes())
            .unwrap();
    }
    assert!(std::fs::metadata(&p).unwrap().len() <= 100 + 30);
    assert!(generation(&p, 3).exists());
    assert!(!generation(&p, 4).exists());
    let last = std::fs::read_to_string(&p).unwrap();
    assert!(last.ends_with("line 49 of a chatty service\n"), "{last}");
}

#[cfg(unix)]
#[test]
fn a_link_at_a_log_name_is_replaced_never_written_through() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "theirs\n").unwrap();
    let p = d.path().join("web.log");
    let mut log = LogFile::open(&p, 1000, 3).unwrap();
    log.write_all(b"one\n").unwrap();
    std::fs::remove_file(&p).unwrap();
    std::os::unix::fs::symlink(&victim, &p).unwrap();
    std::thread::sleep(NAME_CHECK);
    log.write_all(b"two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "theirs\n");
    assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains("was a symbolic link to"), "{text}");
    assert!(text.ends_with("two\n"), "{text}");
    // Readers do not follow one either.
    std::fs::remove_file(&p).unwrap();
    std::os::unix::fs::symlink(&victim, &p).unwrap();
    assert!(tail(&p, 5).is_empty());
    assert!(Follower::from_end(&p).poll().is_empty());
    // Opened afresh (a start): the same.
    mark_run(&p, "web starting");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "theirs\n");
    assert!(current_run(&p).is_empty());
}

#[test]
fn a_follower_reads_across_a_rotation() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("web.log");
    std::fs::write(&p, "old\n").unwrap();
    let mut f = Follower::from_end(&p);
    assert!(f.poll().is_empty());
    let mut w = open_append(&p).unwrap();
    w.write_all(b"one\n").unwrap();
    std::fs::rename(&p, generation(&p, 1)).unwrap();
    w.write_all(b"two\n").unwrap(); // still into the renamed file
    std::fs::write(&p, "three\n").unwrap();
    assert_eq!(String::from_utf8(f.poll()).unwrap(), "one\ntwo\nthree\n");
    std::fs::write(&p, "").unwrap(); // truncated
    open_append(&p).unwrap().write_all(b"four\n").unwrap();
    assert_eq!(String::from_utf8(f.poll()).unwrap(), "four\n");
}

#[test]
fn only_the_last_run_is_quoted_with_its_head_and_tail() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s.log");
    std::fs::write(&p, "before any mark\n").unwrap();
    mark_run(&p, "web starting");
    open_append(&p)
        .unwrap()
        .write_all(b"run one failed\n")
        .unwrap();
    mark_run(&p, "web starting");
    let mut f = open_append(&p).unwrap();
    for i in 0..30 {
        writeln!(f, "2026-11-30T04:50:00.123Z line {i}").unwrap();
    }
    let run = current_run(&p);
    assert_eq!(run.len(), 30, "{run:?}");
    assert_eq!(run[0], "line 0");
    let all = std::fs::read_to_string(&p).unwrap();
    let marks: Vec<&str> = all.lines().filter(|l| l.contains(RUN_MARK)).collect();
    assert_eq!(marks.len(), 2);
    assert!(split_stamp(marks[0]).0.is_some(), "stamped: {}", marks[0]);
    let q = quote_head_tail(&run, 3, 4);
    assert!(
        q.starts_with("  | line 0\n  | line 1\n  | line 2\n  | … 23 line(s) left out …"),
        "{q}"
    );
    assert!(q.ends_with("  | line 29"), "{q}");
    assert!(!q.contains("run one"));
    // Few lines: all of them.
    assert_eq!(quote_head_tail(&run[..5], 3, 4).lines().count(), 5);
    // No mark at all: everything is the current run.
    std::fs::write(&p, "a\nb\n").unwrap();
    assert_eq!(current_run(&p), vec!["a", "b"]);
}

#[test]
fn tail_gives_last_lines() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s.log");
    std::fs::write(&p, "a\nb\nc\n").unwrap();
    assert_eq!(tail(&p, 2), vec!["b", "c"]);
    assert!(tail(&d.path().join("none"), 2).is_empty());
}
