//! A synchroniser by name, as a crate declares it: its name and aliases, one line of help,
//! the options it reads (each with its key, an optional flag of its own, its default and its
//! help) and a factory that makes it from [`SyncOptions`] or says what is wrong with them.
//!
//! Every synchroniser crate declares its own [`SyncEntry`]s (`crossbow_sma::entries()`,
//! [`independent_entry`]); a registry (`crossbow_session::registry::SyncRegistry`) only
//! collects them, finds one by name, turns each declared flag (`--alpha 0.1`) into its option
//! (`alpha=0.1`) and refuses an option no one read. Nothing above this crate knows a
//! synchroniser's settings by name.
//!
//! ```
//! use crossbow_replica::catalog::{OptionSpec, SyncEntry, SyncOptions};
//! use crossbow_replica::sync::Independent;
//!
//! let entry = SyncEntry::new("mine", "my algorithm", |o: &SyncOptions| {
//!     let period: u64 = o.parse_or("period", 4)?;
//!     if period == 0 {
//!         return Err("period must be at least 1, got 0".into());
//!     }
//!     Ok(Independent::default())
//! })
//! .option(OptionSpec::new("period", "4", "iterations between averages"));
//! assert!(entry.build(&SyncOptions::new().option("period", "2")).is_ok());
//! assert!(entry.build(&SyncOptions::new().option("period", "0")).is_err());
//! ```

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::str::FromStr;
use std::sync::Arc;

use crossbow_kernels::CpuBackend;

use crate::sync::{Independent, Synchroniser};

/// The backend of GPU devices (CUDA; without the `cuda` feature, a stub that reports it).
pub type GpuBackend = crossbow_kernels::cuda::CudaBackend;

/// One option a synchroniser reads: `--sync-opt KEY=VALUE`, `[sync-options] KEY = VALUE`,
/// and, when it has a flag, `--FLAG VALUE` (and the top-level key `FLAG = VALUE` of a config
/// file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionSpec {
    /// The option's key.
    pub key: &'static str,
    /// A flag of its own (without dashes), when it has one.
    pub flag: Option<&'static str>,
    /// Its default, as a reader wants to see it (`1/k`, `0.9`).
    pub default: &'static str,
    /// What it does, with its accepted values.
    pub help: &'static str,
}

impl OptionSpec {
    /// An option without a flag of its own.
    pub const fn new(key: &'static str, default: &'static str, help: &'static str) -> Self {
        OptionSpec { key, flag: None, default, help }
    }

    /// The same option with the flag `--KEY`.
    pub const fn with_flag(mut self) -> Self {
        self.flag = Some(self.key);
        self
    }

    /// The same option with the flag `--FLAG` (a name of its own, e.g. `ako-partitions` for
    /// Ako's `partitions`: flags are shared by every synchroniser, keys are not).
    pub const fn with_flag_named(mut self, flag: &'static str) -> Self {
        self.flag = Some(flag);
        self
    }

    /// `KEY [DEFAULT]` (or `--KEY [DEFAULT]` for an option with a flag) and its help.
    pub fn describe(&self) -> String {
        match self.flag {
            Some(f) => format!("--{f} [{}]: {}", self.default, self.help),
            None => format!("{} [{}]: {}", self.key, self.default, self.help),
        }
    }
}

/// What a synchroniser is made from: its options as text, `KEY=VALUE`. The factory reads
/// them with [`SyncOptions::get`], [`SyncOptions::parse`] or [`SyncOptions::parse_or`]; an
/// option it never reads is an error of the registry (a typo must not pass silently).
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    options: BTreeMap<String, String>,
    read: RefCell<BTreeSet<String>>,
}

impl SyncOptions {
    /// No options.
    pub fn new() -> Self {
        SyncOptions::default()
    }

    /// The options `KEY -> VALUE`.
    pub fn from_map(options: BTreeMap<String, String>) -> Self {
        SyncOptions { options, read: RefCell::default() }
    }

    /// Sets option `key` to `value` (replacing an earlier value).
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
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

    /// Every option, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when no option is given.
    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// Forgets which options were read (before a factory runs).
    pub fn clear_reads(&self) {
        self.read.borrow_mut().clear();
    }

    /// The options given that no one read since [`SyncOptions::clear_reads`].
    pub fn unread(&self) -> Vec<&str> {
        let read = self.read.borrow();
        self.options.keys().filter(|k| !read.contains(*k)).map(String::as_str).collect()
    }
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

/// A synchroniser made by a [`SyncEntry`], ready for either kind of device.
pub struct BuiltSynchroniser {
    inner: Box<dyn BothBackends>,
}

impl BuiltSynchroniser {
    /// Wraps a synchroniser that runs on both backends.
    pub fn new<S>(s: S) -> Self
    where
        S: Synchroniser<CpuBackend> + Synchroniser<GpuBackend> + 'static,
    {
        BuiltSynchroniser { inner: Box::new(s) }
    }

    /// For CPU devices.
    pub fn cpu(self) -> Box<dyn Synchroniser<CpuBackend>> {
        self.inner.cpu()
    }

    /// For GPU devices.
    pub fn gpu(self) -> Box<dyn Synchroniser<GpuBackend>> {
        self.inner.gpu()
    }
}

type Factory = Arc<dyn Fn(&SyncOptions) -> Result<BuiltSynchroniser, String> + Send + Sync>;

/// One synchroniser as its crate declares it.
#[derive(Clone)]
pub struct SyncEntry {
    name: String,
    help: String,
    aliases: Vec<String>,
    options: Vec<OptionSpec>,
    factory: Factory,
}

impl std::fmt::Debug for SyncEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncEntry").field("name", &self.name).field("options", &self.options).finish()
    }
}

impl SyncEntry {
    /// Synchroniser `name` with one line of `help` (what it does, not its options: those are
    /// declared with [`SyncEntry::option`] and listed after it), made by `factory` (cheap: it
    /// also runs to check a configuration before training starts). Avoid `,` and `/` in the
    /// name (the separators of `crossbow experiment tta --sync`).
    pub fn new<S, F>(name: &str, help: &str, factory: F) -> Self
    where
        S: Synchroniser<CpuBackend> + Synchroniser<GpuBackend> + 'static,
        F: Fn(&SyncOptions) -> Result<S, String> + Send + Sync + 'static,
    {
        let factory: Factory = Arc::new(move |o: &SyncOptions| factory(o).map(BuiltSynchroniser::new));
        SyncEntry { name: name.trim().to_string(), help: help.to_string(), aliases: vec![], options: vec![], factory }
    }

    /// Another name it answers to.
    pub fn alias(mut self, alias: &str) -> Self {
        self.aliases.push(alias.to_string());
        self
    }

    /// An option it reads.
    pub fn option(mut self, spec: OptionSpec) -> Self {
        self.options.retain(|o| o.key != spec.key);
        self.options.push(spec);
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its other names.
    pub fn aliases(&self) -> &[String] {
        &self.aliases
    }

    /// Its one line of help, without the options.
    pub fn summary(&self) -> &str {
        &self.help
    }

    /// Its help: the summary, then each option with its default.
    pub fn help(&self) -> String {
        if self.options.is_empty() {
            return format!("{}; options: none", self.help);
        }
        let opts: Vec<String> = self.options.iter().map(OptionSpec::describe).collect();
        format!("{}; options: {}", self.help, opts.join("; "))
    }

    /// The options it declares.
    pub fn options(&self) -> &[OptionSpec] {
        &self.options
    }

    /// Whether it declares option `key`.
    pub fn reads(&self, key: &str) -> bool {
        self.options.iter().any(|o| o.key == key)
    }

    /// Makes it from `options` (the factory's error as it is; the caller names the
    /// synchroniser). Options it did not read are left for the caller to refuse
    /// ([`SyncOptions::unread`]).
    pub fn build(&self, options: &SyncOptions) -> Result<BuiltSynchroniser, String> {
        options.clear_reads();
        (self.factory)(options)
    }
}

/// [`Independent`]: learners train alone with momentum SGD; the central model is their mean.
pub fn independent_entry() -> SyncEntry {
    SyncEntry::new(
        "independent",
        "learners train independently with plain SGD; the central model is their average",
        |_: &SyncOptions| Ok(Independent::default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_tracked_as_read() {
        let o = SyncOptions::new().option("a", "1").option("b", "x");
        assert_eq!(o.unread(), ["a", "b"]);
        assert_eq!(o.parse_or::<u32>("a", 0).unwrap(), 1);
        assert_eq!(o.unread(), ["b"]);
        let e = o.parse::<u32>("b").unwrap_err();
        assert!(e.contains("option b=x") && e.contains("u32"), "{e}");
        assert!(o.unread().is_empty());
        o.clear_reads();
        assert_eq!(o.unread(), ["a", "b"]);
        assert_eq!(o.parse_or::<u32>("c", 7).unwrap(), 7);
    }

    #[test]
    fn an_entry_lists_its_options_in_its_help() {
        let e = independent_entry();
        assert_eq!(e.help(), format!("{}; options: none", e.summary()));
        let e = e.option(OptionSpec::new("p", "4", "a period").with_flag()).option(OptionSpec::new("q", "no", "x"));
        assert!(e.help().ends_with("options: --p [4]: a period; q [no]: x"), "{}", e.help());
        assert!(e.reads("p") && !e.reads("r"));
        assert_eq!(e.build(&SyncOptions::new()).unwrap().cpu().name(), "independent");
    }
}
