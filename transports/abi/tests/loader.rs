//! The run-time loader against real shared libraries: the fixture plugins of
//! `tests/fixtures` (built here with cargo into `target/plugin-fixtures`, a target
//! directory of their own), a text file posing as a plugin, and the in-process
//! transport's plugin library found next to this test binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ipl_transport_abi::ffi::ABI_VERSION;
use ipl_transport_abi::loader::{plugin_file_name, PLUGIN_PATH_VAR};
use ipl_transport_abi::{
    discover, discover_default, load_file, search_path, ChannelClosed, LoadError, ReceivedBuffer,
    TransportCapabilities, TransportError, TransportEvents,
};

/// How long one cargo build may take (a cold build on a loaded two-core machine is
/// slow; a warm one takes a second).
const BUILD_DEADLINE: Duration = Duration::from_secs(600);

const FIXTURES: [&str; 5] = ["good", "badabi", "badmagic", "nosymbol", "datasymbol"];

/// `<target>/<profile>`: the directory above this test binary's `deps`.
fn profile_dir() -> PathBuf {
    let exe = fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Runs cargo with `args`, waiting at most [`BUILD_DEADLINE`]; panics with cargo's
/// output if it fails or hangs.
fn cargo(args: &[&str], what: &str) {
    let log_path = profile_dir()
        .parent()
        .unwrap()
        .join(format!("loader-test-{what}-{}.log", std::process::id()));
    let log = fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO"))
        .args(args)
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("cannot run cargo");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > BUILD_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = fs::read_to_string(&log_path).unwrap_or_default();
    let _ = fs::remove_file(&log_path);
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!("building {what} failed ({s}):\ncargo {args:?}\n{output}"),
        None => panic!("building {what} took more than {BUILD_DEADLINE:?}:\n{output}"),
    }
}

/// Builds the fixture plugins (once per test process) and returns the directory that
/// holds their libraries.
fn fixtures() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = profile_dir().parent().unwrap().join("plugin-fixtures");
        let target = target.to_str().unwrap();
        for name in FIXTURES {
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name)
                .join("Cargo.toml");
            cargo(
                &[
                    "build",
                    "--quiet",
                    "--manifest-path",
                    manifest.to_str().unwrap(),
                    "--target-dir",
                    target,
                ],
                &format!("fixture-{name}"),
            );
        }
        Path::new(target).join("debug")
    })
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "ipl-loader-{tag}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        TempDir(fs::canonicalize(dir).unwrap())
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// Copies the fixture library `fixture` into this directory as `file`.
    fn copy_fixture(&self, fixture: &str, file: &str) -> PathBuf {
        let dst = self.0.join(file);
        fs::copy(fixtures().join(plugin_file_name(fixture)), &dst).unwrap();
        dst
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Events of a transport instance, recorded.
#[derive(Default)]
struct Recorder {
    opened: Mutex<Vec<u64>>,
    messages: Mutex<Vec<Vec<u8>>>,
}

impl TransportEvents for Recorder {
    fn channel_opened(&self, channel: u64) {
        self.opened.lock().unwrap().push(channel);
    }
    fn message(&self, _: u64, buf: ReceivedBuffer) {
        self.messages.lock().unwrap().push(buf.to_vec());
    }
    fn channel_closed(&self, _: u64, _: ChannelClosed) {}
}

/// A library whose entry symbol is a data object: refused with a typed error, not
/// called (before, the call jumped into non-executable memory: SIGSEGV).
#[test]
fn an_entry_symbol_that_is_data_is_refused() {
    let dir = TempDir::new("data");
    let data = dir.copy_fixture("datasymbol", &plugin_file_name("datasymbol"));
    let Err(e) = load_file(&data) else {
        panic!("a data entry symbol loaded");
    };
    assert!(matches!(e, LoadError::NotAFunction { .. }), "{e:?}");
    assert_names_file(&e, &data);
}

fn assert_names_file(e: &LoadError, file: &Path) {
    let msg = e.to_string();
    assert!(
        msg.contains(&file.display().to_string()),
        "the error does not name {}: {msg}",
        file.display()
    );
}

#[test]
fn good_plugin_loads_and_bad_files_are_refused() {
    let dir = TempDir::new("scan");
    let good = dir.copy_fixture("good", &plugin_file_name("good"));
    let badabi = dir.copy_fixture("badabi", &plugin_file_name("badabi"));
    let badmagic = dir.copy_fixture("badmagic", &plugin_file_name("badmagic"));
    let nosymbol = dir.copy_fixture("nosymbol", &plugin_file_name("nosymbol"));
    let notalib = dir.path().join(plugin_file_name("notalib"));
    fs::write(&notalib, "this is a text file, not a shared library\n").unwrap();
    // Files outside the naming scheme are never opened, even real libraries (opening
    // badmagic under these names would add refusals).
    dir.copy_fixture("badmagic", "libsomething_else.so");
    dir.copy_fixture("badmagic", &format!("{}.bak", plugin_file_name("x")));
    dir.copy_fixture("badmagic", "ipl_plugin_y.txt");

    let found = discover(&[dir.path()]);

    // The good plugin loads despite its neighbours, and works through the library.
    assert_eq!(found.loaded.len(), 1, "{found:?}");
    let p = found.get("good").expect("good plugin not loaded");
    assert_eq!(p.name(), "good");
    assert_eq!(p.version(), "1.2.3");
    assert_eq!(p.priority(), 7);
    assert_eq!(p.capabilities(), TransportCapabilities::RELIABLE);
    assert_eq!(p.origin(), good.display().to_string());
    assert_eq!(p.availability(), Ok(()));
    let a = p.create("", Arc::new(Recorder::default())).unwrap();
    let b = p.create("", Arc::new(Recorder::default())).unwrap();
    let (addr_a, addr_b) = (a.local_address().unwrap(), b.local_address().unwrap());
    assert!(addr_a.starts_with(b"good:"), "{addr_a:?}");
    assert_ne!(addr_a, addr_b);
    assert!(matches!(
        a.connect(&addr_b, Duration::from_millis(10)),
        Err(TransportError::Refused(_))
    ));
    assert!(matches!(
        p.create("fail", Arc::new(Recorder::default())),
        Err(TransportError::InvalidArgument(_))
    ));

    // Each bad file is refused for its own reason, and the error names it.
    assert_eq!(found.refused.len(), 4, "{:#?}", found.refused);
    let e = found.refusal(&notalib).expect("text file not refused");
    assert!(matches!(e, LoadError::NotALibrary { .. }), "{e:?}");
    assert_names_file(e, &notalib);
    let e = found.refusal(&nosymbol).expect("nosymbol not refused");
    assert!(matches!(e, LoadError::MissingSymbol { .. }), "{e:?}");
    assert_names_file(e, &nosymbol);
    let e = found.refusal(&badabi).expect("badabi not refused");
    assert!(
        matches!(e, LoadError::WrongAbiVersion { found, expected, .. }
            if *found == ABI_VERSION + 1 && *expected == ABI_VERSION),
        "{e:?}"
    );
    assert_names_file(e, &badabi);
    let e = found.refusal(&badmagic).expect("badmagic not refused");
    assert!(matches!(e, LoadError::BadMagic { .. }), "{e:?}");
    assert_names_file(e, &badmagic);

    // Discovering again gives the same answer (the good plugin comes from the cache).
    let again = discover(&[dir.path()]);
    assert_eq!(again.loaded.len(), 1);
    assert_eq!(again.get("good").unwrap().origin(), p.origin());
    assert_eq!(again.refused.len(), 4);

    // load_file on its own.
    assert_eq!(load_file(&good).unwrap().name(), "good");
    assert!(matches!(
        load_file(&badmagic),
        Err(LoadError::BadMagic { .. })
    ));
}

#[test]
fn first_plugin_of_a_name_wins() {
    let first = TempDir::new("first");
    let second = TempDir::new("second");
    let linked = TempDir::new("linked");
    let kept = first.copy_fixture("good", &plugin_file_name("good"));
    // Another library (a copy: another file, loaded separately) declaring "good".
    let copy = second.copy_fixture("good", &plugin_file_name("good2"));
    // The same library reached again through a hard link, as cargo's `deps` and its
    // parent: skipped silently.
    fs::hard_link(&kept, linked.path().join(plugin_file_name("good"))).unwrap();

    let found = discover(&[first.path(), linked.path(), second.path()]);
    assert_eq!(found.loaded.len(), 1, "{found:?}");
    assert_eq!(
        found.get("good").unwrap().origin(),
        kept.display().to_string()
    );
    assert_eq!(found.refused.len(), 1, "{:#?}", found.refused);
    let e = found.refusal(&copy).expect("duplicate not reported");
    assert!(
        matches!(e, LoadError::Duplicate { name, .. } if name == "good"),
        "{e:?}"
    );
    assert_names_file(e, &copy);
    assert!(e.to_string().contains(&kept.display().to_string()), "{e}");
}

/// The environment variable a parent test sets to run [`search_path_in_child`] for
/// real; it holds the directories the child must see first, in order.
const CHILD_VAR: &str = "IPL_LOADER_TEST_EXPECT_DIRS";

/// `search_path` honours `IPL_PLUGIN_PATH`: checked in a child process of this test
/// binary (see [`search_path_in_child`]), so that no test changes this process's
/// environment while others read it.
#[test]
fn search_path_honours_ipl_plugin_path() {
    let a = TempDir::new("env-a");
    let b = TempDir::new("env-b");
    a.copy_fixture("good", &plugin_file_name("good"));
    let missing = a.path().join("does-not-exist");
    let var = std::env::join_paths([a.path(), &missing, b.path(), a.path()]).unwrap();
    let expect = std::env::join_paths([a.path(), b.path()]).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "search_path_in_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PLUGIN_PATH_VAR, &var)
        .env(CHILD_VAR, &expect)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the child test did not run:\n{text}"
    );
}

/// Run for real only by [`search_path_honours_ipl_plugin_path`], in a child process
/// whose environment it sets; a no-op otherwise.
#[test]
fn search_path_in_child() {
    let Some(expect) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let expect: Vec<PathBuf> = std::env::split_paths(&expect).collect();
    let dirs = search_path();
    let exe = fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let exe_dir = exe.parent().unwrap().to_path_buf();
    let mut want = expect.clone();
    want.push(exe_dir.clone());
    want.push(exe_dir.parent().unwrap().to_path_buf());
    assert_eq!(
        dirs, want,
        "IPL_PLUGIN_PATH dirs (deduplicated, existing only) first"
    );

    let found = discover_default();
    let good = found
        .get("good")
        .expect("good plugin not found via IPL_PLUGIN_PATH");
    assert!(
        Path::new(good.origin()).starts_with(&expect[0]),
        "{}",
        good.origin()
    );
}

/// `cargo build -p ipl-plugin-inproc` puts `libipl_plugin_inproc.so` in
/// `target/debug`, the parent of this test binary's directory, where the default search
/// path finds it with no setup. The library is built here, as a user would.
#[test]
fn inproc_plugin_found_next_to_the_executable() {
    let profile_dir = profile_dir();
    let profile = match profile_dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev".to_string(),
        other => other.to_string(),
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    cargo(
        &[
            "build",
            "--quiet",
            "-p",
            "ipl-plugin-inproc",
            "--manifest-path",
            workspace.to_str().unwrap(),
            "--target-dir",
            profile_dir.parent().unwrap().to_str().unwrap(),
            "--profile",
            &profile,
        ],
        "inproc-plugin",
    );
    let lib = profile_dir.join(plugin_file_name("inproc"));
    assert!(lib.is_file(), "{} was not built", lib.display());
    assert!(search_path().contains(&profile_dir));

    let found = discover(&search_path());
    let p = found.get("inproc").unwrap_or_else(|| {
        panic!(
            "inproc not found in {:?}; refused: {:#?}",
            search_path(),
            found.refused
        )
    });
    assert_eq!(p.availability(), Ok(()));

    // A message through the loaded library.
    let inbox = Arc::new(Recorder::default());
    let a = p.create("", Arc::new(Recorder::default())).unwrap();
    let b = p.create("", inbox.clone()).unwrap();
    let ch = a
        .connect(&b.local_address().unwrap(), Duration::from_secs(5))
        .unwrap();
    a.send(ch, &[b"loaded ", b"at run time"]).unwrap();
    assert_eq!(inbox.opened.lock().unwrap().len(), 1);
    assert_eq!(inbox.messages.lock().unwrap()[0], b"loaded at run time");
}
