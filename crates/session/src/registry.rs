//! Synchronisers selectable by name: `--sync NAME` in every `crossbow` command.
//!
//! A [`SyncRegistry`] maps names to factories. [`SyncRegistry::builtin`] holds `sma` (the
//! default for models without batch norm), `ssgd` (the default for batch-normalised ones),
//! `easgd` and `independent`; a researcher adds their own with
//! [`SyncRegistry::register`] and trains with it through a [`crate::Session`] (or runs the
//! whole command line with it: `crossbow_cli::main_with(registry)`):
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
//! # Ok::<(), crossbow_session::CliError>(())
//! ```
//!
//! A factory receives the parsed [`SyncOptions`]: the generic `--sync-opt KEY=VALUE` options
//! (or the `[sync-options]` table of a config file), read with [`SyncOptions::get`] /
//! [`SyncOptions::parse_or`], and the shared flags `--alpha`, `--central-momentum` and
//! `--sma-form`, which a synchroniser may use or ignore. An option the factory never reads is
//! an error (a typo must not pass silently), as is an unknown name.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::str::FromStr;

use crossbow_kernels::CpuBackend;
use crossbow_replica::Synchroniser;
use crossbow_replica::sync::Independent;
use crossbow_sma::{AlphaRule, BnParams, CentralStep, DecayOn, EaSgd, SSgd, Sma, SmaForm, SyncKind};

use crate::config::TrainConfig;
use crate::error::CliError;

/// The backend of GPU devices (CUDA; without the `cuda` feature, a stub that reports it).
pub type GpuBackend = crossbow_kernels::cuda::CudaBackend;

/// What a synchroniser factory is built from: the generic options (`--sync-opt KEY=VALUE`,
/// `[sync-options]` in a config file) and the shared flags.
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    alpha: Option<f64>,
    central_momentum: Option<f64>,
    sma_form: Option<String>,
    options: BTreeMap<String, String>,
    read: RefCell<BTreeSet<String>>,
    /// The shared flags the factory asked for.
    shared_read: RefCell<BTreeSet<&'static str>>,
}

/// The default of `--central-momentum` (a value other than it is a setting given).
const DEFAULT_CENTRAL_MOMENTUM: f64 = 0.9;

impl SyncOptions {
    /// No options.
    pub fn new() -> Self {
        SyncOptions::default()
    }

    /// Sets the generic option `key` to `value` (replacing an earlier value).
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// The options of a training configuration.
    pub fn from_config(cfg: &TrainConfig) -> Self {
        SyncOptions {
            alpha: cfg.alpha,
            central_momentum: Some(cfg.central_momentum),
            sma_form: cfg.sma_form.clone(),
            options: cfg.sync_options.clone(),
            read: RefCell::default(),
            shared_read: RefCell::default(),
        }
    }

    /// Sets the shared flags `--alpha`, `--central-momentum` and `--sma-form`.
    pub fn shared(mut self, alpha: Option<f64>, central_momentum: Option<f64>, sma_form: Option<&str>) -> Self {
        self.alpha = alpha;
        self.central_momentum = central_momentum;
        self.sma_form = sma_form.map(String::from);
        self
    }

    /// `--alpha` (pull towards the central model), when given. A synchroniser that does not
    /// ask for it gets an error when it is given (a setting must not pass silently).
    pub fn alpha(&self) -> Option<f64> {
        self.shared_read.borrow_mut().insert("alpha");
        self.alpha
    }

    /// `--central-momentum`, when given (`crossbow train` always gives it: default 0.9).
    pub fn central_momentum(&self) -> Option<f64> {
        self.shared_read.borrow_mut().insert("central-momentum");
        self.central_momentum
    }

    /// `--sma-form`, when given.
    pub fn sma_form(&self) -> Option<&str> {
        self.shared_read.borrow_mut().insert("sma-form");
        self.sma_form.as_deref()
    }

    /// The shared flags given (central momentum: other than its default) that the factory
    /// never asked for.
    fn unread_shared(&self) -> Vec<&'static str> {
        let read = self.shared_read.borrow();
        let given = [
            ("alpha", self.alpha.is_some()),
            ("central-momentum", self.central_momentum.is_some_and(|m| m != DEFAULT_CENTRAL_MOMENTUM)),
            ("sma-form", self.sma_form.is_some()),
        ];
        given.into_iter().filter(|(k, set)| *set && !read.contains(k)).map(|(k, _)| k).collect()
    }

    /// The raw text of option `key`, when given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.read.borrow_mut().insert(key.to_string());
        self.options.get(key).map(String::as_str)
    }

    /// Option `key` parsed as a `T`, when given; the error names the option and its value.
    pub fn parse<T>(&self, key: &str) -> Result<Option<T>, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        let Some(text) = self.get(key) else { return Ok(None) };
        text.trim().parse::<T>().map(Some).map_err(|e| {
            let ty = std::any::type_name::<T>().rsplit("::").next().unwrap_or("value");
            format!("option {key}={text}: not a valid {ty} ({e})")
        })
    }

    /// Option `key` parsed as a `T`, or `default` when not given.
    pub fn parse_or<T>(&self, key: &str, default: T) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        Ok(self.parse(key)?.unwrap_or(default))
    }

    /// Every generic option, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when no generic option is given.
    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// Generic options no one asked for.
    fn unread(&self) -> Vec<&str> {
        let read = self.read.borrow();
        self.options.keys().filter(|k| !read.contains(*k)).map(String::as_str).collect()
    }
}

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

/// The object-safe face of a type that synchronises on both backends.
trait BothBackends: Send + Sync {
    fn cpu(self: Box<Self>) -> Box<dyn Synchroniser<CpuBackend>>;
    fn gpu(self: Box<Self>) -> Box<dyn Synchroniser<GpuBackend>>;
}

impl<T> BothBackends for T
where
    T: Synchroniser<CpuBackend> + Synchroniser<GpuBackend> + 'static,
{
    fn cpu(self: Box<Self>) -> Box<dyn Synchroniser<CpuBackend>> {
        self
    }

    fn gpu(self: Box<Self>) -> Box<dyn Synchroniser<GpuBackend>> {
        self
    }
}

/// A synchroniser made by a [`SyncRegistry`], ready for either kind of device.
pub struct BuiltSynchroniser {
    inner: Box<dyn BothBackends>,
}

impl BuiltSynchroniser {
    /// For CPU devices.
    pub fn cpu(self) -> Box<dyn Synchroniser<CpuBackend>> {
        self.inner.cpu()
    }

    /// For GPU devices.
    pub fn gpu(self) -> Box<dyn Synchroniser<GpuBackend>> {
        self.inner.gpu()
    }
}

type Factory = std::sync::Arc<dyn Fn(&SyncOptions) -> Result<BuiltSynchroniser, String> + Send + Sync>;

#[derive(Clone)]
struct Entry {
    name: String,
    help: String,
    aliases: &'static [&'static str],
    factory: Factory,
}

/// Synchronisers by name, each with a one-line help and a factory.
#[derive(Clone, Default)]
pub struct SyncRegistry {
    entries: Vec<Entry>,
    /// Flags of their own for synchroniser options: `(flag without dashes, option)`.
    flags: Vec<(String, String)>,
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

/// The builtin whose options are the shared flags, as the `crossbow-sma` enum.
fn builtin_kind(name: &str, o: &SyncOptions) -> Result<SyncKind, String> {
    // The library's messages name the settings; here they are flags.
    if let Some(a) = o.alpha()
        && !(a.is_finite() && a >= 0.0)
    {
        return Err(format!("--alpha must be a finite number >= 0, got {a}"));
    }
    // Only SMA has a central momentum and a form: EA-SGD reads only --alpha.
    let sma = normalise(name) == "sma";
    let cm = if sma { o.central_momentum().unwrap_or(DEFAULT_CENTRAL_MOMENTUM) } else { DEFAULT_CENTRAL_MOMENTUM };
    if !(0.0..1.0).contains(&cm) {
        return Err(format!("--central-momentum must be in [0, 1), got {cm}"));
    }
    let mut kind = SyncKind::parse(name, o.alpha().map(|a| a as f32), cm as f32)?;
    if let (SyncKind::Sma { form, .. }, Some(f)) = (&mut kind, if sma { o.sma_form() } else { None }) {
        *form = SmaForm::parse(f).map_err(|e| format!("--sma-form: {e}"))?;
    }
    Ok(kind)
}

impl SyncRegistry {
    /// No synchronisers.
    pub fn empty() -> Self {
        SyncRegistry::default()
    }

    /// `sma` (the default for models without batch norm), `ssgd` (the default for
    /// batch-normalised ones), `easgd` and `independent`.
    pub fn builtin() -> Self {
        let mut r = SyncRegistry::empty();
        r.add(
            "sma",
            "synchronous model averaging (the default for models without batch norm); settings: --alpha [1/k], --central-momentum [0.9], --sma-form [local-momentum]; options: alpha-rule (1/k, 1/sqrt(k), ramp:E or a number), central-step (sum|mean), bn-params (average|local|a pull), weight-decay-on (learners|central), ssgd-until (an epoch: S-SGD before it, SMA after, i.e. post-local SGD; put it at the first rate drop)",
            &[],
            |o| match builtin_kind("sma", o)? {
                SyncKind::Sma { alpha, central_momentum, form } => {
                    let mut sma = Sma::new(alpha, central_momentum).with_form(form);
                    if let Some(rule) = o.get("alpha-rule") {
                        if o.alpha().is_some() {
                            return Err("give either --alpha or the option alpha-rule, not both".into());
                        }
                        sma = sma.with_alpha(AlphaRule::parse(rule).map_err(|e| format!("option alpha-rule: {e}"))?);
                    }
                    if let Some(v) = o.get("central-step") {
                        sma = sma.with_central_step(CentralStep::parse(v).map_err(|e| format!("option {e}"))?);
                    }
                    if let Some(v) = o.get("bn-params") {
                        sma = sma.with_bn_params(BnParams::parse(v).map_err(|e| format!("option {e}"))?);
                    }
                    if let Some(v) = o.get("weight-decay-on") {
                        sma = sma.with_decay_on(DecayOn::parse(v).map_err(|e| format!("option {e}"))?);
                    }
                    if let Some(v) = o.get("ssgd-until") {
                        match v.trim().parse::<f64>() {
                            Ok(e) if e.is_finite() && e >= 0.0 => sma = sma.with_ssgd_until(Some(e)),
                            _ => return Err(format!("option ssgd-until={v}: must be an epoch >= 0 (S-SGD before it, SMA from it on)")),
                        }
                    }
                    Ok(sma)
                }
                other => Err(format!("internal: sma parsed as {other:?}")),
            },
        );
        r.add(
            "ssgd",
            "synchronous SGD: mean gradient, one step on the central model, copied to every learner (the default for batch-normalised models)",
            &["sgd", "sync"],
            |_| Ok(SSgd::default()),
        );
        r.add("easgd", "elastic averaging SGD (synchronous); settings: --alpha [0.9/k]", &["elastic"], |o| {
            match builtin_kind("easgd", o)? {
                SyncKind::EaSgd { alpha } => Ok(EaSgd::new(alpha)),
                other => Err(format!("internal: easgd parsed as {other:?}")),
            }
        });
        r.add(
            "independent",
            "learners train independently with plain SGD; the central model is their average",
            &[],
            |_| Ok(Independent::default()),
        );
        r
    }

    /// Adds synchroniser `name` (replacing one of the same name, builtins included): `help` is
    /// one line for `--help` and error messages (say which options it reads), `factory` makes
    /// it from the options or says what is wrong with them (e.g. `"option period must be at
    /// least 1, got 0"`). The factory should be cheap: it also runs to check a configuration
    /// before training starts. Names are matched ignoring case, `-` and `_`; avoid `,` (the
    /// list separator of `crossbow experiment tta --sync`).
    pub fn register<S, F>(&mut self, name: &str, help: &str, factory: F) -> &mut Self
    where
        S: Synchroniser<CpuBackend> + Synchroniser<GpuBackend> + 'static,
        F: Fn(&SyncOptions) -> Result<S, String> + Send + Sync + 'static,
    {
        self.add(name, help, &[], factory)
    }

    fn add<S, F>(&mut self, name: &str, help: &str, aliases: &'static [&'static str], factory: F) -> &mut Self
    where
        S: Synchroniser<CpuBackend> + Synchroniser<GpuBackend> + 'static,
        F: Fn(&SyncOptions) -> Result<S, String> + Send + Sync + 'static,
    {
        let key = normalise(name);
        self.entries.retain(|e| normalise(&e.name) != key);
        let factory: Factory =
            std::sync::Arc::new(move |o: &SyncOptions| factory(o).map(|s| BuiltSynchroniser { inner: Box::new(s) }));
        self.entries.push(Entry { name: name.trim().to_string(), help: help.to_string(), aliases, factory });
        self
    }

    /// Gives option `option` a flag of its own: `--FLAG VALUE` (or `--FLAG=VALUE`) on any
    /// command means `--sync-opt OPTION=VALUE` (e.g. `option_flag("ako-partitions",
    /// "partitions")`). The flag must not be one of crossbow's own.
    pub fn option_flag(&mut self, flag: &str, option: &str) -> &mut Self {
        let flag = flag.trim_start_matches('-').to_string();
        self.flags.retain(|(f, _)| *f != flag);
        self.flags.push((flag, option.to_string()));
        self
    }

    /// The option flags, `(flag, option)`.
    pub fn option_flags(&self) -> &[(String, String)] {
        &self.flags
    }

    /// `args` with every option flag rewritten as `--sync-opt OPTION=VALUE`; a flag without
    /// a value is left for the parser to reject.
    pub fn expand_option_flags(&self, args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
        let mut out = Vec::with_capacity(args.len());
        let mut it = args.into_iter().peekable();
        while let Some(a) = it.next() {
            let text = a.to_string_lossy().into_owned();
            let hit = self.flags.iter().find_map(|(f, o)| {
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
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// The help line of `name`.
    pub fn help(&self, name: &str) -> Option<&str> {
        self.find(name).ok().map(|e| e.help.as_str())
    }

    /// One line per synchroniser: `name  help`.
    pub fn describe(&self) -> String {
        let width = self.entries.iter().map(|e| e.name.len()).max().unwrap_or(0);
        self.entries.iter().map(|e| format!("{:width$}  {}", e.name, e.help)).collect::<Vec<_>>().join("\n")
    }

    fn find(&self, name: &str) -> Result<&Entry, String> {
        let key = normalise(name);
        self.entries
            .iter()
            .find(|e| normalise(&e.name) == key)
            .or_else(|| self.entries.iter().find(|e| e.aliases.iter().any(|a| normalise(a) == key)))
            .ok_or_else(|| format!("unknown synchroniser '{name}' (registered: {})", self.names().join(", ")))
    }

    /// The registered name `name` refers to (`S-SGD` is `ssgd`); the error lists every name.
    pub fn resolve(&self, name: &str) -> Result<&str, String> {
        self.find(name).map(|e| e.name.as_str())
    }

    /// Makes synchroniser `name` from `options`. Errors (exit code 2) name the flag, the
    /// synchroniser and the option: an unknown name, a bad shared flag, the factory's error,
    /// and a generic option the factory did not read.
    pub fn build(&self, name: &str, options: &SyncOptions) -> Result<BuiltSynchroniser, CliError> {
        let entry = self.find(name).map_err(|e| CliError::usage(format!("--sync: {e}")))?;
        // The shared flags are checked whichever synchroniser reads them.
        builtin_kind("sma", options).map_err(CliError::usage)?;
        options.read.borrow_mut().clear();
        options.shared_read.borrow_mut().clear();
        let built = (entry.factory)(options).map_err(|e| CliError::usage(format!("--sync {}: {e}", entry.name)))?;
        if let Some(key) = options.unread().first() {
            return Err(CliError::usage(format!(
                "--sync {}: unknown option '{key}' (--sync-opt / [sync-options]); {}: {}",
                entry.name, entry.name, entry.help
            )));
        }
        let unread = options.unread_shared();
        if !unread.is_empty() {
            let flags: Vec<String> = unread.iter().map(|k| format!("--{k}")).collect();
            let users: Vec<&str> = self
                .entries
                .iter()
                .filter(|e| unread.iter().any(|k| e.help.contains(&format!("--{k}"))))
                .map(|e| e.name.as_str())
                .collect();
            return Err(CliError::usage(format!(
                "{} {} not a setting of --sync {} (it would be ignored){}",
                flags.join(", "),
                if flags.len() == 1 { "is" } else { "are" },
                entry.name,
                match users.as_slice() {
                    [] => String::new(),
                    [one] => format!("; {one} uses {}", if flags.len() == 1 { "it" } else { "them" }),
                    many => format!("; {} use {}", many.join(" and "), if flags.len() == 1 { "it" } else { "them" }),
                }
            )));
        }
        Ok(built)
    }

    /// Makes the synchroniser a training configuration names, with its options.
    pub fn build_for(&self, cfg: &TrainConfig) -> Result<BuiltSynchroniser, CliError> {
        self.build(&cfg.sync, &SyncOptions::from_config(cfg))
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
        assert_eq!(r.option_flags(), &[("ako-partitions".to_string(), "partitions".to_string())]);
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

    fn err(r: Result<BuiltSynchroniser, CliError>) -> String {
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
    fn sma_reads_the_shared_flags() {
        let o = SyncOptions::new().shared(Some(0.25), Some(0.5), None);
        let s = SyncRegistry::builtin().build("sma", &o).unwrap().cpu();
        let settings = s.settings();
        assert_eq!(settings.get("alpha"), Some(&crossbow_replica::SettingValue::Num(0.25)));
        assert_eq!(settings.get("central_momentum"), Some(&crossbow_replica::SettingValue::Num(0.5)));
        assert_eq!(settings.get("form"), Some(&crossbow_replica::SettingValue::Str("local-momentum".into())));
        let bad = SyncOptions::new().shared(None, None, Some("fancy"));
        assert!(err(SyncRegistry::builtin().build("sma", &bad)).contains("--sma-form"));
        let bad = SyncOptions::new().shared(Some(f64::NAN), None, None);
        assert!(err(SyncRegistry::builtin().build("ssgd", &bad)).contains("--alpha"));
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
        r.register("SMA", "mine", |_: &SyncOptions| Ok(Independent::default()));
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
