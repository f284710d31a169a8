//! Synchronisers selectable by name: `--sync NAME` in every `crossbow` command.
//!
//! A [`SyncRegistry`] collects the [`SyncEntry`]s each synchroniser crate declares (its name,
//! help, options with their flags and defaults, and a factory). [`SyncRegistry::builtin`]
//! holds `crossbow_sma::entries()` (`sma`; `ssgd`, the default;
//! `easgd`) and `independent`; a researcher adds their
//! own with [`SyncRegistry::register`] (a factory) or [`SyncRegistry::add`] (an entry with
//! declared options) and trains with it through a [`crate::Session`] (or runs the whole
//! command line with it: `crossbow_cli::main_with(registry)`):
//!
//! ```no_run
//! use crossbow_replica::sync::Independent;
//! use crossbow_session::registry::{SyncOptions, SyncRegistry};
//! use crossbow_session::{Session, TrainFile};
//!
//! let mut registry = SyncRegistry::builtin();
//! // Any type with `impl<B: Backend> Synchroniser<B>` works on the CPU and on GPUs.
//! registry.register("mine", "my algorithm; options: none", |_opts: &SyncOptions| Ok(Independent::default()));
//! let settings = TrainFile { sync: Some("mine".into()), ..TrainFile::default() };
//! Session::new(settings)?.registry(registry).run()?;
//! # Ok::<(), crossbow_session::SessionError>(())
//! ```
//!
//! A factory receives the run's [`SyncOptions`]: `--sync-opt KEY=VALUE`, the `[sync-options]`
//! table of a config file, and each declared flag (`--alpha 0.1` is SMA's option `alpha`; in a
//! config file the top-level key `alpha = 0.1`). An option the factory never reads is an
//! error naming the synchronisers that do read it (a typo or a setting of another
//! synchroniser must not pass silently), as is an unknown name. The session knows no
//! synchroniser's settings by name: the entries declare them.

use crossbow_kernels::CpuBackend;
use crossbow_replica::Synchroniser;
use crossbow_replica::catalog::independent_entry;
pub use crossbow_replica::catalog::{BuiltSynchroniser, GpuBackend, OptionSpec, SyncEntry, SyncOptions};

use crate::config::TrainConfig;
use crate::error::SessionError;

/// Parses one `--sync-opt KEY=VALUE` (the value may be empty and may contain `=`).
pub fn parse_sync_opt(s: &str) -> Result<(String, String), String> {
    let Some((key, value)) = s.split_once('=') else {
        return Err(format!("'{s}' must be KEY=VALUE (e.g. period=4)"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("'{s}' has an empty KEY (expected KEY=VALUE, e.g. period=4)"));
    }
    Ok((key.to_string(), value.trim().to_string()))
}

/// Synchronisers by name, each with its help, options and factory.
#[derive(Clone, Default)]
pub struct SyncRegistry {
    entries: Vec<SyncEntry>,
    /// Flags given to options with [`SyncRegistry::option_flag`]: `(flag without dashes, option)`.
    extra_flags: Vec<(String, String)>,
}

impl std::fmt::Debug for SyncRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncRegistry").field("names", &self.names()).finish()
    }
}

/// Lower case without `-` and `_`: `S-SGD`, `ssgd` and `s_sgd` are one name.
fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(['-', '_'], "")
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

impl SyncRegistry {
    /// No synchronisers.
    pub fn empty() -> Self {
        SyncRegistry::default()
    }

    /// `crossbow_sma::entries()` (`sma`, `ssgd`, `easgd`) and `independent`.
    pub fn builtin() -> Self {
        let mut r = SyncRegistry::empty();
        for e in crossbow_sma::entries() {
            r.add(e);
        }
        r.add(independent_entry());
        r
    }

    /// Adds synchroniser `name` (replacing one of the same name, builtins included): `help` is
    /// one line for `--help` and error messages (say which options it reads), `factory` makes
    /// it from the options or says what is wrong with them (e.g. `"option period must be at
    /// least 1, got 0"`). The factory should be cheap: it also runs to check a configuration
    /// before training starts. Names are matched ignoring case, `-` and `_`; avoid `,` and
    /// `/` (the separators of `crossbow experiment tta --sync`). [`SyncRegistry::add`] takes
    /// an entry that declares its options (with flags of their own, defaults and help).
    pub fn register<S, F>(&mut self, name: &str, help: &str, factory: F) -> &mut Self
    where
        S: Synchroniser<CpuBackend> + Synchroniser<GpuBackend> + 'static,
        F: Fn(&SyncOptions) -> Result<S, String> + Send + Sync + 'static,
    {
        self.add(SyncEntry::new(name, help, factory))
    }

    /// Adds a synchroniser as its crate declares it (replacing one of the same name).
    pub fn add(&mut self, entry: SyncEntry) -> &mut Self {
        let key = normalise(entry.name());
        self.entries.retain(|e| normalise(e.name()) != key);
        self.entries.push(entry);
        self
    }

    /// Gives option `option` a flag of its own: `--FLAG VALUE` (or `--FLAG=VALUE`) on any
    /// command means `--sync-opt OPTION=VALUE` (e.g. `option_flag("period-flag",
    /// "period")`). The flag must not be one of crossbow's own. An entry's declared flags
    /// ([`OptionSpec::with_flag`]) need no call.
    pub fn option_flag(&mut self, flag: &str, option: &str) -> &mut Self {
        let flag = flag.trim_start_matches('-').to_string();
        self.extra_flags.retain(|(f, _)| *f != flag);
        self.extra_flags.push((flag, option.to_string()));
        self
    }

    /// Every option flag, `(flag, option)`: those the entries declare, then those given with
    /// [`SyncRegistry::option_flag`]; each flag once.
    pub fn option_flags(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = vec![];
        for o in self.entries.iter().flat_map(|e| e.options()) {
            if let Some(f) = o.flag
                && !out.iter().any(|(g, _)| g == f)
            {
                out.push((f.to_string(), o.key.to_string()));
            }
        }
        for (f, k) in &self.extra_flags {
            out.retain(|(g, _)| g != f);
            out.push((f.clone(), k.clone()));
        }
        out
    }

    /// The option flag `--FLAG` stands for, when it is one.
    pub fn flag_option(&self, flag: &str) -> Option<String> {
        self.option_flags().into_iter().find(|(f, _)| f == flag).map(|(_, o)| o)
    }

    /// `args` with every option flag rewritten as `--sync-opt OPTION=VALUE`; a flag without
    /// a value is left for the parser to reject.
    pub fn expand_option_flags(&self, args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
        let flags = self.option_flags();
        let mut out = Vec::with_capacity(args.len());
        let mut it = args.into_iter().peekable();
        while let Some(a) = it.next() {
            let text = a.to_string_lossy().into_owned();
            let hit = flags.iter().find_map(|(f, o)| {
                let long = format!("--{f}");
                if text == long {
                    Some((o.clone(), None))
                } else {
                    text.strip_prefix(&format!("{long}=")).map(|v| (o.clone(), Some(v.to_string())))
                }
            });
            match hit {
                Some((o, Some(v))) => {
                    out.push("--sync-opt".into());
                    out.push(format!("{o}={v}").into());
                }
                Some((o, None)) => match it.peek().map(|v| v.to_string_lossy().into_owned()) {
                    Some(v) if !v.starts_with("--") => {
                        it.next();
                        out.push("--sync-opt".into());
                        out.push(format!("{o}={v}").into());
                    }
                    _ => out.push(a),
                },
                None => out.push(a),
            }
        }
        out
    }

    /// Every registered name, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name()).collect()
    }

    /// The help of `name`: its summary and its options.
    pub fn help(&self, name: &str) -> Option<String> {
        self.find(name).ok().map(SyncEntry::help)
    }

    /// The entry of `name`.
    pub fn entry(&self, name: &str) -> Option<&SyncEntry> {
        self.find(name).ok()
    }

    /// One line per synchroniser: `name  help`.
    pub fn describe(&self) -> String {
        let width = self.entries.iter().map(|e| e.name().len()).max().unwrap_or(0);
        self.entries.iter().map(|e| format!("{:width$}  {}", e.name(), e.help())).collect::<Vec<_>>().join("\n")
    }

    /// The synchronisers that read option `key`.
    pub fn readers_of(&self, key: &str) -> Vec<&str> {
        self.entries.iter().filter(|e| e.reads(key)).map(|e| e.name()).collect()
    }

    /// How a user gives option `key`: its flag (`--alpha`) when some entry declares one, else
    /// `option 'KEY'`.
    fn shown(&self, key: &str) -> String {
        let flag = self.entries.iter().flat_map(|e| e.options()).find(|o| o.key == key).and_then(|o| o.flag);
        let extra = self.extra_flags.iter().find(|(_, o)| o == key).map(|(f, _)| f.as_str());
        match flag.or(extra) {
            Some(f) => format!("--{f}"),
            None => format!("option '{key}'"),
        }
    }

    fn find(&self, name: &str) -> Result<&SyncEntry, String> {
        let key = normalise(name);
        self.entries
            .iter()
            .find(|e| normalise(e.name()) == key)
            .or_else(|| self.entries.iter().find(|e| e.aliases().iter().any(|a| normalise(a) == key)))
            .ok_or_else(|| format!("unknown synchroniser '{name}' (registered: {})", self.names().join(", ")))
    }

    /// The registered name `name` refers to (`S-SGD` is `ssgd`); the error lists every name.
    pub fn resolve(&self, name: &str) -> Result<&str, String> {
        self.find(name).map(|e| e.name())
    }

    /// Makes synchroniser `name` from `options`. Errors (exit code 2) name the flag, the
    /// synchroniser and the option: an unknown name, the factory's error, an option of
    /// another synchroniser (naming those that read it) and an option no one reads.
    pub fn build(&self, name: &str, options: &SyncOptions) -> Result<BuiltSynchroniser, SessionError> {
        let entry = self.find(name).map_err(|e| SessionError::usage(format!("--sync: {e}")))?;
        let built = entry.build(options).map_err(|e| SessionError::usage(format!("--sync {}: {e}", entry.name())))?;
        let unread: Vec<String> = options.unread().into_iter().map(String::from).collect();
        let (others, unknown): (Vec<&String>, Vec<&String>) =
            unread.iter().partition(|k| !self.readers_of(k.as_str()).is_empty());
        if let Some(key) = unknown.first() {
            return Err(SessionError::usage(format!(
                "--sync {}: unknown option '{key}' (--sync-opt / [sync-options]); {}: {}",
                entry.name(),
                entry.name(),
                entry.help()
            )));
        }
        if !others.is_empty() {
            let shown: Vec<String> = others.iter().map(|k| self.shown(k)).collect();
            let mut users: Vec<String> = vec![];
            for k in &others {
                for u in self.readers_of(k) {
                    if !users.iter().any(|x| x == u) {
                        users.push(u.to_string());
                    }
                }
            }
            let verb = if users.len() == 1 { "uses" } else { "use" };
            return Err(SessionError::usage(format!(
                "{} {} not a setting of --sync {} (it would be ignored); {} {verb} {}",
                shown.join(", "),
                if shown.len() == 1 { "is" } else { "are" },
                entry.name(),
                and_list(&users),
                if shown.len() == 1 { "it" } else { "them" }
            )));
        }
        Ok(built)
    }

    /// Makes the synchroniser a training configuration names, with its options.
    pub fn build_for(&self, cfg: &TrainConfig) -> Result<BuiltSynchroniser, SessionError> {
        self.build(&cfg.sync, &SyncOptions::from_map(cfg.sync_options.clone()))
    }

    /// Moves the top-level keys of a config file (or of a checkpoint's saved settings) that
    /// are option flags (`alpha = 0.1`) into its `[sync-options]` table, under the option's
    /// key. A key also given in `[sync-options]` is an error. With `saved`, a checkpoint
    /// written when SMA's settings were settings of every run: a key the run's synchroniser
    /// does not read is dropped (such runs saved it at its default, or unset).
    pub fn lift_option_keys(&self, table: &mut toml::Table, saved: bool) -> Result<(), String> {
        let sync = table.get("sync").and_then(|v| v.as_str()).map(String::from);
        let entry = sync.as_deref().and_then(|s| self.find(s).ok());
        for (flag, key) in self.option_flags() {
            let Some(value) = table.remove(&flag) else { continue };
            if saved && entry.is_some_and(|e| !e.reads(&key)) {
                continue;
            }
            let opts = table.entry("sync-options").or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(opts) = opts.as_table_mut() else {
                return Err("sync-options must be a table ([sync-options])".into());
            };
            if opts.contains_key(&key) {
                return Err(format!("{flag} is given twice: as a key and as {key} in [sync-options]; keep one"));
            }
            opts.insert(key, value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainFile;
    use crossbow_kernels::Backend;

    #[test]
    fn option_flags_become_sync_options() {
        let mut r = SyncRegistry::builtin();
        r.option_flag("--ako-partitions", "partitions");
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let got = r.expand_option_flags(args(&["crossbow", "train", "--ako-partitions", "4", "--lr", "0.1"]));
        assert_eq!(got, args(&["crossbow", "train", "--sync-opt", "partitions=4", "--lr", "0.1"]));
        let got = r.expand_option_flags(args(&["x", "--ako-partitions=auto"]));
        assert_eq!(got, args(&["x", "--sync-opt", "partitions=auto"]));
        // Without a value the flag is left as it is, for the parser to reject by name.
        let got = r.expand_option_flags(args(&["x", "--ako-partitions", "--lr", "1"]));
        assert_eq!(got, args(&["x", "--ako-partitions", "--lr", "1"]));
        let flags: Vec<String> = r.option_flags().into_iter().map(|(f, o)| format!("{f}={o}")).collect();
        assert_eq!(
            flags,
            ["alpha=alpha", "central-momentum=central-momentum", "sma-form=sma-form", "ako-partitions=partitions"]
        );
    }
    use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, StepInfo};
    use crossbow_replica::{Result, Settings};

    /// A user synchroniser generic over the backend, as a researcher writes one.
    struct Every {
        period: u64,
    }

    impl<B: Backend> Synchroniser<B> for Every {
        fn name(&self) -> &str {
            "every"
        }
        fn settings(&self) -> Settings {
            Settings::new().int("period", self.period as i64)
        }
        fn learner_step(&self, _: &B, _: &StepInfo, _: LearnerBuffers<'_, B>, _: &B::Buffer, _: usize) -> Result<()> {
            Ok(())
        }
        fn reduce_device(
            &self,
            _: &B,
            _: &StepInfo,
            _: &[LearnerRef<'_, B>],
            _: &Central<B>,
            _: &mut B::Buffer,
            _: usize,
        ) -> Result<()> {
            Ok(())
        }
        fn apply_device(&self, _: &B, _: &StepInfo, _: &mut B::Buffer, _: &mut Central<B>, _: usize) -> Result<()> {
            Ok(())
        }
    }

    fn with_every() -> SyncRegistry {
        let mut r = SyncRegistry::builtin();
        r.register("every", "test; options: period=N [4]", |o: &SyncOptions| {
            let period: u64 = o.parse_or("period", 4)?;
            if period == 0 {
                return Err("option period must be at least 1, got 0".into());
            }
            Ok(Every { period })
        });
        r
    }

    fn err(r: Result<BuiltSynchroniser, SessionError>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => {
                assert_eq!(e.exit_code(), 2, "{e}");
                e.to_string()
            }
        }
    }

    #[test]
    fn builtins_are_registered_and_build_on_both_backends() {
        let r = SyncRegistry::builtin();
        assert_eq!(r.names(), ["sma", "ssgd", "easgd", "independent"]);
        for name in ["sma", "ssgd", "easgd", "independent"] {
            let cpu = r.build(name, &SyncOptions::new()).unwrap().cpu();
            assert_eq!(cpu.name(), name);
            let gpu = r.build(name, &SyncOptions::new()).unwrap().gpu();
            assert_eq!(gpu.name(), name);
        }
        assert_eq!(r.resolve("S-SGD").unwrap(), "ssgd");
        assert_eq!(r.resolve("elastic").unwrap(), "easgd");
        assert!(r.help("sma").unwrap().contains("--alpha"));
    }

    #[test]
    fn sma_reads_its_own_options_and_another_synchroniser_refuses_them() {
        let r = SyncRegistry::builtin();
        let o = SyncOptions::new().option("alpha", "0.25").option("central-momentum", "0.5");
        let s = r.build("sma", &o).unwrap().cpu();
        let settings = s.settings();
        assert_eq!(settings.get("alpha"), Some(&crossbow_replica::SettingValue::Num(0.25)));
        assert_eq!(settings.get("central_momentum"), Some(&crossbow_replica::SettingValue::Num(0.5)));
        assert_eq!(settings.get("form"), Some(&crossbow_replica::SettingValue::Str("local-momentum".into())));
        assert!(err(r.build("sma", &SyncOptions::new().option("sma-form", "fancy"))).contains("--sma-form"));
        assert!(err(r.build("sma", &SyncOptions::new().option("alpha", "NaN"))).contains("--alpha"));
        // S-SGD reads none of them: each is named with its flag, and who reads it.
        let e = err(r.build("ssgd", &SyncOptions::new().option("alpha", "0.1")));
        assert_eq!(e, "--alpha is not a setting of --sync ssgd (it would be ignored); sma and easgd use it");
        let e = err(r.build("easgd", &o));
        assert_eq!(e, "--central-momentum is not a setting of --sync easgd (it would be ignored); sma uses it");
        let e = err(r.build("ssgd", &SyncOptions::new().option("bn-params", "local")));
        assert!(e.starts_with("option 'bn-params' is not a setting of --sync ssgd"), "{e}");
        // The declared flags, once each, become options.
        let flags = r.option_flags();
        assert_eq!(flags.iter().filter(|(f, _)| f == "alpha").count(), 1);
        assert_eq!(r.flag_option("sma-form").as_deref(), Some("sma-form"));
        assert_eq!(r.flag_option("lr"), None);
    }

    #[test]
    fn option_keys_of_a_file_or_an_old_checkpoint_move_into_sync_options() {
        let r = SyncRegistry::builtin();
        let mut t: toml::Table = toml::from_str("sync = \"sma\"\nalpha = 0.1\nlr = 0.5\n").unwrap();
        r.lift_option_keys(&mut t, false).unwrap();
        assert_eq!(t.get("sync-options").unwrap().get("alpha"), Some(&toml::Value::Float(0.1)));
        assert!(t.get("alpha").is_none() && t.get("lr").is_some());
        let mut t: toml::Table = toml::from_str("alpha = 0.1\n[sync-options]\nalpha = 0.2\n").unwrap();
        assert!(r.lift_option_keys(&mut t, false).unwrap_err().contains("given twice"));
        // A checkpoint of an S-SGD run saved SMA's central momentum at its default: dropped.
        let mut t: toml::Table = toml::from_str("sync = \"ssgd\"\ncentral-momentum = 0.9\n").unwrap();
        r.lift_option_keys(&mut t, true).unwrap();
        assert!(t.get("sync-options").is_none() && t.get("central-momentum").is_none());
        let mut t: toml::Table = toml::from_str("sync = \"sma\"\ncentral-momentum = 0.9\n").unwrap();
        r.lift_option_keys(&mut t, true).unwrap();
        assert_eq!(t.get("sync-options").unwrap().get("central-momentum"), Some(&toml::Value::Float(0.9)));
    }

    #[test]
    fn user_synchronisers_are_found_and_read_their_options() {
        let r = with_every();
        assert_eq!(r.names(), ["sma", "ssgd", "easgd", "independent", "every"]);
        assert_eq!(r.resolve("EVERY").unwrap(), "every");
        let s = r.build("every", &SyncOptions::new().option("period", "2")).unwrap().cpu();
        assert_eq!(s.name(), "every");
        assert_eq!(s.settings().to_string(), "period=2");
        let s = r.build("every", &SyncOptions::new()).unwrap().gpu();
        assert_eq!(s.settings().to_string(), "period=4");
    }

    #[test]
    fn registering_a_name_again_replaces_it() {
        let mut r = SyncRegistry::builtin();
        r.register("SMA", "mine", |_: &SyncOptions| Ok(crossbow_replica::sync::Independent::default()));
        assert_eq!(r.names(), ["ssgd", "easgd", "independent", "SMA"]);
        assert_eq!(r.build("sma", &SyncOptions::new()).unwrap().cpu().name(), "independent");
    }

    #[test]
    fn an_unknown_name_lists_every_registered_name() {
        let e = err(with_every().build("hogwild", &SyncOptions::new()));
        assert!(e.starts_with("--sync: unknown synchroniser 'hogwild'"), "{e}");
        for n in ["sma", "ssgd", "easgd", "independent", "every"] {
            assert!(e.contains(n), "{n}: {e}");
        }
        assert!(err(SyncRegistry::empty().build("sma", &SyncOptions::new())).contains("registered: )"));
    }

    #[test]
    fn option_errors_name_the_synchroniser_and_the_option() {
        let r = with_every();
        let e = err(r.build("every", &SyncOptions::new().option("period", "x")));
        assert!(e.contains("--sync every") && e.contains("period=x") && e.contains("u64"), "{e}");
        let e = err(r.build("every", &SyncOptions::new().option("period", "0")));
        assert!(e.contains("--sync every") && e.contains("period"), "{e}");
        let e = err(r.build("every", &SyncOptions::new().option("perod", "3")));
        assert!(e.contains("--sync every: unknown option 'perod'") && e.contains("period=N"), "{e}");
        let e = err(r.build("ssgd", &SyncOptions::new().option("period", "3")));
        assert!(e.contains("--sync ssgd: unknown option 'period'"), "{e}");
    }

    #[test]
    fn sync_opt_parsing() {
        assert_eq!(parse_sync_opt("period=4").unwrap(), ("period".into(), "4".into()));
        assert_eq!(parse_sync_opt(" a = b=c ").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(parse_sync_opt("flag=").unwrap(), ("flag".into(), String::new()));
        let e = parse_sync_opt("period").unwrap_err();
        assert!(e.contains("'period'") && e.contains("KEY=VALUE"), "{e}");
        let e = parse_sync_opt("=4").unwrap_err();
        assert!(e.contains("empty KEY"), "{e}");
    }

    #[test]
    fn training_configs_resolve_through_the_registry() {
        let r = with_every();
        let f = TrainFile { sync: Some("Every".into()), ..TrainFile::default() };
        let cfg = TrainConfig::from_file_with(f, &r).unwrap();
        assert_eq!(cfg.sync, "every");
        assert_eq!(r.build_for(&cfg).unwrap().cpu().settings().to_string(), "period=4");
        // The builtin registry does not know it.
        let f = TrainFile { sync: Some("every".into()), ..TrainFile::default() };
        let e = TrainConfig::from_file(f).unwrap_err().to_string();
        assert!(e.contains("--sync: unknown synchroniser 'every'"), "{e}");
    }

    #[test]
    fn sync_options_table_in_a_config_file() {
        let r = with_every();
        let file: TrainFile = toml::from_str("sync = \"every\"\n[sync-options]\nperiod = 3\n").unwrap();
        let cfg = TrainConfig::from_file_with(file.clone(), &r).unwrap();
        assert_eq!(cfg.sync_options.get("period").map(String::as_str), Some("3"));
        assert_eq!(r.build_for(&cfg).unwrap().cpu().settings().to_string(), "period=3");
        // Flags (--sync-opt) override the file key by key.
        let flags = TrainFile { sync_options: Some([("period".into(), "5".into())].into()), ..TrainFile::default() };
        let cfg = TrainConfig::from_file_with(file.clone().overridden_by(flags), &r).unwrap();
        assert_eq!(r.build_for(&cfg).unwrap().cpu().settings().to_string(), "period=5");
        // Bad values name the option; unknown keys and tables are errors.
        let bad: TrainFile = toml::from_str("sync = \"every\"\n[sync-options]\nperiod = \"x\"\n").unwrap();
        let e = TrainConfig::from_file_with(bad, &r).unwrap_err().to_string();
        assert!(e.contains("--sync every") && e.contains("period=x"), "{e}");
        let bad: TrainFile = toml::from_str("sync = \"every\"\n[sync-options]\nperiods = 2\n").unwrap();
        let e = TrainConfig::from_file_with(bad, &r).unwrap_err().to_string();
        assert!(e.contains("unknown option 'periods'"), "{e}");
        let bad: TrainFile = toml::from_str("sync = \"every\"\n[sync-options.period]\nx = 1\n").unwrap();
        let e = TrainConfig::from_file_with(bad, &r).unwrap_err().to_string();
        assert!(e.contains("[sync-options] period"), "{e}");
        // Options of other types are text: booleans, floats, strings.
        let file: TrainFile = toml::from_str("sync = \"every\"\n[sync-options]\nperiod = 2\n").unwrap();
        assert!(TrainConfig::from_file_with(file, &r).is_ok());
    }

    #[test]
    fn toml_option_values_become_text() {
        let file: TrainFile =
            toml::from_str("sync = \"every\"\n[sync-options]\na = 0.5\nb = true\nc = \"paper\"\nd = 7\n").unwrap();
        let opts = crate::config::sync_option_texts(file.sync_options.as_ref()).unwrap();
        let v: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(v, [("a", "0.5"), ("b", "true"), ("c", "paper"), ("d", "7")]);
    }
}
