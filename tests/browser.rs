//! The browser page (`examples/browser`) in real browsers: built with its own command
//! (`serve.sh --build-only`), served from here on 127.0.0.1, opened in headless
//! Chromium (WebGPU on SwiftShader) and headless Firefox ESR (WebGPU on Mesa's
//! lavapipe). The page POSTs its report (JSON) back to this test's server. Each run
//! must pass every check of the page against the CPU reference, on the reduction the
//! device allows, with f16 refused (typed) exactly where the adapter lacks
//! `shader-f16`. Two more runs show the page without a GPU: Chromium without
//! `--enable-unsafe-webgpu` (`navigator.gpu` gives no adapter) and Firefox with WebGPU
//! off (no `navigator.gpu`) must say so and still run the CPU reference.
//!
//! Needs the wasm32 target, the wasm-bindgen CLI at the version the page pins,
//! `chromium`, `firefox-esr` and lavapipe (`.ci/run` installs them). With `CI=true`
//! anything missing fails the test; without it the test prints SKIPPED and passes.
//! `DELTATAPE_BROWSER_TIMEOUT_S` bounds each browser run (default 180).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A line that shows in `cargo test`'s output even when the test passes.
macro_rules! report {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn page_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/browser")
}

fn scratch() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser")
}

/// The wasm-bindgen version the page pins (`wasm-bindgen = "=x.y.z"`).
fn pinned_wasm_bindgen() -> String {
    let toml = std::fs::read_to_string(page_dir().join("Cargo.toml")).expect("page Cargo.toml");
    let line = toml
        .lines()
        .find(|l| l.starts_with("wasm-bindgen = \"="))
        .expect("the page pins wasm-bindgen with =x.y.z");
    line.trim_start_matches("wasm-bindgen = \"=")
        .trim_end_matches('"')
        .to_string()
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What is missing to run the page here, if anything.
fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    let targets = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    if !targets.lines().any(|l| l == "wasm32-unknown-unknown") {
        missing.push("the wasm32-unknown-unknown target (rustup target add)".into());
    }
    let version = pinned_wasm_bindgen();
    let cli = output("wasm-bindgen", &["--version"]).unwrap_or_default();
    if cli.split_whitespace().nth(1) != Some(version.as_str()) {
        missing.push(format!(
            "wasm-bindgen {version} (cargo install wasm-bindgen-cli --version {version})"
        ));
    }
    for browser in ["chromium", "firefox-esr"] {
        if output(browser, &["--version"]).is_none() {
            missing.push(format!("{browser} (apt-get install {browser})"));
        }
    }
    let lavapipe = std::fs::read_dir("/usr/share/vulkan/icd.d").is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
    });
    if !lavapipe {
        missing.push("lavapipe, Firefox's adapter (apt-get install mesa-vulkan-drivers)".into());
    }
    missing
}

/// The built page (index.html and pkg/), once per test process; `None`: skipped.
fn site() -> Option<&'static Path> {
    static SITE: OnceLock<Option<PathBuf>> = OnceLock::new();
    SITE.get_or_init(|| {
        let missing = missing();
        if !missing.is_empty() {
            let list = missing.join("; ");
            assert!(!ci(), "CI=true but the browser test lacks: {list}");
            report!("SKIPPED: the browser test needs {list}");
            return None;
        }
        let site = scratch().join("site");
        let started = Instant::now();
        // Its own target directory: the outer `cargo test` may still hold the default one.
        let out = Command::new("bash")
            .arg(page_dir().join("serve.sh"))
            .arg("--build-only")
            .arg(&site)
            .env("CARGO_TARGET_DIR", scratch().join("target"))
            .output()
            .expect("run serve.sh");
        assert!(
            out.status.success(),
            "building the page failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        report!("browser page built in {:.0?}", started.elapsed());
        Some(site)
    })
    .as_deref()
}

/// A small HTTP server on 127.0.0.1: GET serves the site, POST /report/NAME keeps the
/// body under NAME for [`Server::wait`].
struct Server {
    port: u16,
    reports: Arc<(Mutex<HashMap<String, String>>, Condvar)>,
}

impl Server {
    fn get() -> &'static Server {
        static SERVER: OnceLock<Server> = OnceLock::new();
        SERVER.get_or_init(|| {
            let site = site().expect("built").to_path_buf();
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
            let port = listener.local_addr().expect("address").port();
            let reports = Arc::new((Mutex::new(HashMap::new()), Condvar::new()));
            let kept = reports.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (site, kept) = (site.clone(), kept.clone());
                    // A browser keeps idle connections open: one thread each.
                    std::thread::spawn(move || {
                        let _ = serve(stream, &site, &kept);
                    });
                }
            });
            Server { port, reports }
        })
    }

    /// The report posted under `name`, waiting at most `timeout`.
    fn wait(&self, name: &str, timeout: Duration) -> Option<String> {
        let (map, posted) = &*self.reports;
        let deadline = Instant::now() + timeout;
        let mut map = map.lock().unwrap();
        loop {
            if let Some(r) = map.remove(name) {
                return Some(r);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            map = posted.wait_timeout(map, left).unwrap().0;
        }
    }
}

type Reports = (Mutex<HashMap<String, String>>, Condvar);

/// Answer one connection (one request: each answer closes it).
fn serve(stream: TcpStream, site: &Path, reports: &Reports) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = target.split('?').next().unwrap_or("/");
    let (status, kind, body) = match method {
        "POST" if path.starts_with("/report/") => {
            let mut body = vec![0; length];
            reader.read_exact(&mut body)?;
            let (map, posted) = reports;
            let name = path.trim_start_matches("/report/").to_string();
            let text = String::from_utf8_lossy(&body).into_owned();
            map.lock().unwrap().insert(name, text);
            posted.notify_all();
            ("200 OK", "text/plain", Vec::new())
        }
        "GET" => {
            let file = path.trim_start_matches('/');
            let file = if file.is_empty() { "index.html" } else { file };
            let kind = match file.rsplit('.').next() {
                Some("html") => "text/html; charset=utf-8",
                Some("js") => "text/javascript",
                Some("wasm") => "application/wasm",
                _ => "application/octet-stream",
            };
            match (file.contains(".."), std::fs::read(site.join(file))) {
                (false, Ok(bytes)) => ("200 OK", kind, bytes),
                _ => ("404 Not Found", "text/plain", b"not found".to_vec()),
            }
        }
        _ => ("405 Method Not Allowed", "text/plain", Vec::new()),
    };
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)?;
    stream.flush()
}

#[derive(Clone, Copy, Debug)]
enum Browser {
    Chromium { webgpu: bool },
    Firefox { webgpu: bool },
}

/// Open the page in `browser`, wait for its report, and end the browser. The browser
/// runs in a process group of its own, which is ended whole (a browser starts helper
/// processes of its own).
fn run_page(browser: Browser, name: &str) -> Json {
    // One browser at a time: two at once would share two cores and each run's times.
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::get();
    let url = format!(
        "http://127.0.0.1:{}/index.html?report=/report/{name}",
        server.port
    );
    let profile = scratch().join(format!("profile-{name}"));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).expect("profile dir");
    let runtime = scratch().join("xdg-runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    let mut command = match browser {
        Browser::Chromium { webgpu } => {
            let mut c = Command::new("chromium");
            // --no-sandbox: the test runs as root, where Chromium's sandbox will not start.
            c.args(["--headless=new", "--no-sandbox"]);
            if webgpu {
                c.arg("--enable-unsafe-webgpu");
            }
            // Chromium's own traffic (first run, component updates, sync) off: CI's
            // machine reaches no network, and the runs stay alike.
            c.args([
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ]);
            c.arg(format!("--user-data-dir={}", profile.display()));
            c
        }
        Browser::Firefox { webgpu } => {
            let prefs = format!(
                "user_pref(\"dom.webgpu.enabled\", {webgpu});\n\
                 user_pref(\"gfx.webgpu.ignore-blocklist\", true);\n"
            );
            std::fs::write(profile.join("user.js"), prefs).expect("user.js");
            let mut c = Command::new("firefox-esr");
            c.arg("--headless")
                .arg("--profile")
                .arg(&profile)
                .arg("--no-remote");
            c
        }
    };
    // Without a runtime directory Mesa logs errors (harmless, but noise).
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        command.env("XDG_RUNTIME_DIR", &runtime);
    }
    let log = std::fs::File::create(scratch().join(format!("{name}.log"))).expect("log");
    command
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let started = Instant::now();
    let child = command.spawn().expect("start the browser");
    let timeout = std::env::var("DELTATAPE_BROWSER_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(180);
    let posted = server.wait(name, Duration::from_secs(timeout));
    end(child);
    let Some(text) = posted else {
        panic!(
            "{browser:?} posted no report in {timeout} s; its log: {}",
            scratch().join(format!("{name}.log")).display()
        );
    };
    report!("{name}: the page reported in {:.1?}", started.elapsed());
    Json::parse(&text).unwrap_or_else(|e| panic!("{name}: the report is not JSON ({e}): {text}"))
}

/// End the browser's process group: TERM, then KILL if it lingers.
fn end(mut child: Child) {
    let group = format!("-{}", child.id());
    let signal = |s: &str| {
        let _ = Command::new("kill").args([s, "--", &group]).status();
    };
    signal("-TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            signal("-KILL"); // helpers left behind
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    signal("-KILL");
    let _ = child.wait();
}

/// Print the report's rows (the measurements docs/PORTABILITY.md quotes).
fn show(name: &str, r: &Json) {
    if let Some(d) = r.get("device").filter(|d| !d.is_null()) {
        report!(
            "{name}: adapter {:?}, {}, reduction {}, features {:?}",
            d.str("name"),
            d.str("describe"),
            d.str("reduction"),
            d.strings("features")
        );
    }
    for row in r.items("rows") {
        report!(
            "{name}: {:9} {:29} {:8} error {:.2e} (tolerance {:.0e}) GPU {} ms, CPU {:.2} ms {}",
            row.str("case"),
            row.str("dtypes"),
            row.str("result"),
            row.num("error"),
            row.num("tolerance"),
            row.get("gpu_ms")
                .filter(|g| !g.is_null())
                .map_or("-".into(), |g| format!("{:.2}", g.as_num())),
            row.num("cpu_ms"),
            row.str("why"),
        );
    }
}

/// The checks common to both browsers with WebGPU: the page passed, the device
/// reported no error, `reduction` ran, and each dtype set ran record, repeat, replay
/// and the rollback, refused only where `f16_refused` (typed, naming SHADER_F16).
fn check_gpu_run(name: &str, r: &Json, reduction: &str, f16_refused: bool) {
    show(name, r);
    assert_eq!(r.str("gpu_status"), "ok", "{name}: {}", r.str("message"));
    let device = r.get("device").expect("device");
    assert_eq!(
        device.str("reduction"),
        reduction,
        "{name}: kernels {device:?}"
    );
    let errors = device.strings("errors");
    assert!(errors.is_empty(), "{name}: the device reported {errors:?}");
    let rows = r.items("rows");
    let mut seen = Vec::new();
    for row in &rows {
        let (case, dtypes, result) = (row.str("case"), row.str("dtypes"), row.str("result"));
        seen.push(format!("{case} / {dtypes}"));
        let f16 = dtypes.contains("act f16");
        // repeat moves 16-bit values as words: it needs no shader-f16.
        let refused = f16_refused && f16 && case != "repeat";
        match refused {
            true => {
                assert_eq!(result, "refused", "{name}: {case} / {dtypes}");
                let why = row.str("why");
                assert!(why.contains("SHADER_F16"), "{name}: {case} refused: {why}");
            }
            false => {
                let why = row.str("why");
                assert_eq!(result, "pass", "{name}: {case} / {dtypes}: {why}");
                let (e, t) = (row.num("error"), row.num("tolerance"));
                assert!(e <= t, "{name}: {case} / {dtypes}: error {e} > {t}");
                assert!(
                    !row.get("gpu_ms").is_none_or(Json::is_null),
                    "{name}: {case} untimed"
                );
            }
        }
    }
    for dtypes in ["f32", "bf16", "f16"] {
        for case in ["record", "repeat", "replay", "rollback"] {
            let want = format!("{case} / act {dtypes}, state f32, tape f32");
            assert!(seen.contains(&want), "{name}: no row {want}; rows {seen:?}");
        }
    }
    assert_eq!(rows.len(), 12, "{name}: rows {seen:?}");
    assert_eq!(
        r.get("ok").map(Json::as_bool),
        Some(true),
        "{name}: the page's verdict"
    );
}

/// Chromium's SwiftShader: no shader-f16, so f16 is refused (typed) but for repeat.
/// The browser's adapter offers `subgroups` (size 4), but wgpu 30's WebGPU backend
/// does not map that feature (gfx-rs/wgpu#10146): no wgpu device can ask for it, and
/// record runs its workgroup variant. When wgpu maps it this test fails at the
/// features: the crate's subgroup kernels then need `enable subgroups;` for Tint.
#[test]
fn page_passes_in_headless_chromium() {
    if site().is_none() {
        return;
    }
    let r = run_page(Browser::Chromium { webgpu: true }, "chromium");
    let device = r.get("device").expect("device");
    assert!(device.str("name").contains("swiftshader"), "{device:?}");
    let sizes: Vec<f64> = device
        .items("subgroup_sizes")
        .iter()
        .map(Json::as_num)
        .collect();
    assert_eq!(sizes, [4.0, 4.0], "SwiftShader's subgroups");
    assert!(
        device.get("browser_subgroups").is_some_and(Json::as_bool),
        "{device:?}"
    );
    let features = device.strings("features");
    let has = |f: &str| features.iter().any(|x| x == f);
    assert!(
        !has("subgroups"),
        "wgpu now passes subgroups on: {features:?}"
    );
    assert!(!has("shader-f16"), "{features:?}");
    check_gpu_run("chromium", &r, "workgroup", true);
}

/// Firefox ESR on lavapipe: shader-f16, no subgroups offered: every row runs, on the
/// workgroup path.
#[test]
fn page_passes_in_headless_firefox() {
    if site().is_none() {
        return;
    }
    let r = run_page(Browser::Firefox { webgpu: true }, "firefox");
    let device = r.get("device").expect("device");
    let features = device.strings("features");
    let has = |f: &str| features.iter().any(|x| x == f);
    assert!(has("shader-f16") && !has("subgroups"), "{features:?}");
    let offered = device.get("browser_subgroups").map(Json::as_bool);
    assert_eq!(offered, Some(false), "{device:?}");
    check_gpu_run("firefox", &r, "workgroup", false);
}

/// Without an adapter (Chromium without --enable-unsafe-webgpu) and without WebGPU
/// (Firefox with it off) the page says which, and runs the CPU reference alone.
#[test]
fn page_says_when_there_is_no_webgpu() {
    if site().is_none() {
        return;
    }
    let cases = [
        (
            Browser::Chromium { webgpu: false },
            "chromium-no-adapter",
            "no-adapter",
            "gave no adapter",
        ),
        (
            Browser::Firefox { webgpu: false },
            "firefox-no-webgpu",
            "no-webgpu",
            "navigator.gpu is undefined",
        ),
    ];
    for (browser, name, status, says) in cases {
        let r = run_page(browser, name);
        show(name, &r);
        assert_eq!(r.str("gpu_status"), status, "{name}");
        let message = r.str("message");
        assert!(message.contains(says), "{name}: {message}");
        assert!(
            message.contains("The CPU reference ran alone"),
            "{name}: {message}"
        );
        assert!(r.get("device").is_some_and(Json::is_null), "{name}");
        let rows = r.items("rows");
        assert_eq!(rows.len(), 12, "{name}");
        for row in rows {
            assert_eq!(row.str("result"), "cpu-only", "{name}: {}", row.str("why"));
        }
        assert_eq!(r.get("ok").map(Json::as_bool), Some(true), "{name}");
    }
}

/// Just enough JSON for the page's report.
#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn parse(text: &str) -> Result<Json, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        match p.i == p.s.len() {
            true => Ok(v),
            false => Err(format!("trailing text at {}", p.i)),
        }
    }
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn str(&self, key: &str) -> String {
        match self.get(key) {
            Some(Json::Str(s)) => s.clone(),
            _ => String::new(),
        }
    }
    fn num(&self, key: &str) -> f64 {
        self.get(key).map_or(f64::NAN, Json::as_num)
    }
    fn as_num(&self) -> f64 {
        match self {
            Json::Num(x) => *x,
            _ => f64::NAN,
        }
    }
    fn as_bool(&self) -> bool {
        matches!(self, Json::Bool(true))
    }
    fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }
    /// The array under `key` (empty if there is none).
    fn items(&self, key: &str) -> Vec<Json> {
        match self.get(key) {
            Some(Json::Arr(items)) => items.clone(),
            _ => Vec::new(),
        }
    }
    /// The strings of the array under `key`.
    fn strings(&self, key: &str) -> Vec<String> {
        let text = |j: &Json| match j {
            Json::Str(s) => Some(s.clone()),
            _ => None,
        };
        self.items(key).iter().filter_map(text).collect()
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, word: &str) -> bool {
        let hit = self.s[self.i..].starts_with(word.as_bytes());
        if hit {
            self.i += word.len();
        }
        hit
    }
    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        let at = self.i;
        match self.s.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut fields = Vec::new();
                loop {
                    self.ws();
                    if self.eat("}") {
                        return Ok(Json::Obj(fields));
                    }
                    if !fields.is_empty() && !self.eat(",") {
                        return Err(format!("expected , at {}", self.i));
                    }
                    self.ws();
                    let Json::Str(key) = self.value()? else {
                        return Err(format!("expected a key at {}", self.i));
                    };
                    self.ws();
                    if !self.eat(":") {
                        return Err(format!("expected : at {}", self.i));
                    }
                    fields.push((key, self.value()?));
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.eat("]") {
                        return Ok(Json::Arr(items));
                    }
                    if !items.is_empty() && !self.eat(",") {
                        return Err(format!("expected , at {}", self.i));
                    }
                    items.push(self.value()?);
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let rest = std::str::from_utf8(&self.s[self.i..]).map_err(|e| e.to_string())?;
                    let mut chars = rest.chars();
                    match chars.next() {
                        None => return Err("unterminated string".into()),
                        Some('"') => {
                            self.i += 1;
                            return Ok(Json::Str(out));
                        }
                        Some('\\') => {
                            let (c, used) = match chars.next() {
                                Some('u') => {
                                    let hex = rest.get(2..6).ok_or("short \\u")?;
                                    let code =
                                        u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                                    (char::from_u32(code).unwrap_or('\u{fffd}'), 6)
                                }
                                Some('n') => ('\n', 2),
                                Some('t') => ('\t', 2),
                                Some(c) => (c, 1 + c.len_utf8()),
                                None => return Err("unterminated escape".into()),
                            };
                            out.push(c);
                            self.i += used;
                        }
                        Some(c) => {
                            out.push(c);
                            self.i += c.len_utf8();
                        }
                    }
                }
            }
            _ if self.eat("null") => Ok(Json::Null),
            _ if self.eat("true") => Ok(Json::Bool(true)),
            _ if self.eat("false") => Ok(Json::Bool(false)),
            _ => {
                let number = |c: &u8| c.is_ascii_digit() || b"+-.eE".contains(c);
                while self.s.get(self.i).is_some_and(number) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[at..self.i]).unwrap_or("");
                text.parse()
                    .map(Json::Num)
                    .map_err(|_| format!("bad value at {at}"))
            }
        }
    }
}
