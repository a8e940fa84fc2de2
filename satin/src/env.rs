//! The environment layer of the configuration: the one place that reads the `SATIN_*`
//! variables. [`SatinBuilder`](crate::SatinBuilder) applies it over the defaults when
//! it builds, and its own settings over it (unless
//! [`SatinBuilder::use_env`](crate::SatinBuilder::use_env)`(false)`).
//!
//! | variable | setting | values |
//! |---|---|---|
//! | `SATIN_INLINE_DEPTH` | [`SatinBuilder::inline_depth`](crate::SatinBuilder::inline_depth) | a number, or `max` / `off` (never inline) |
//! | `SATIN_REDO_DEPTH` | [`SatinBuilder::redo_depth`](crate::SatinBuilder::redo_depth) | a number, or `max` / `unbounded` (no bound) |
//! | `SATIN_POLICY` | [`SatinBuilder::policy`](crate::SatinBuilder::policy) | `rs`, `crs`, `acrs`, `cmrs:K` |
//! | `SATIN_STEAL_BACKOFF_US` | [`SatinBuilder::steal_backoff`](crate::SatinBuilder::steal_backoff) | microseconds |
//! | `SATIN_GUARD_PATIENCE_MS` | [`SatinBuilder::guard_patience`](crate::SatinBuilder::guard_patience) | milliseconds |
//! | `SATIN_SAVE_RESULTS` | [`SatinBuilder::save_results`](crate::SatinBuilder::save_results) | `1`/`on`/`true` or `0`/`off`/`false` |
//! | `SATIN_CHECKPOINT_DIR` | [`SatinBuilder::checkpoint_dir`](crate::SatinBuilder::checkpoint_dir) | a directory |
//! | `SATIN_CHECKPOINT_INTERVAL_MS` | [`SatinBuilder::checkpoint_interval`](crate::SatinBuilder::checkpoint_interval) | milliseconds |
//! | `SATIN_ADAPT` | [`SatinBuilder::adaptive`](crate::SatinBuilder::adaptive) | `1`/`on`/`true` or `0`/`off`/`false` |
//! | `SATIN_ADAPT_PERIOD_MS` | [`SatinBuilder::adapt_period`](crate::SatinBuilder::adapt_period) | milliseconds (at least 1) |
//! | `SATIN_ADAPT_MIN_SIZE`, `SATIN_ADAPT_MAX_SIZE` | [`AdaptConfig`](crate::dist::AdaptConfig)'s bounds of the pool's size | a number, at least 1 |
//!
//! An unset or empty variable leaves the setting alone; a value that does not parse
//! is a [`SatinError::Config`] naming the variable.

#![forbid(unsafe_code)]

use crate::dist::parse_policy;
use crate::error::SatinError;
use crate::runtime::Config;
use std::time::Duration;

/// Applies the environment's `SATIN_*` variables onto `config`.
pub(crate) fn apply(config: &mut Config) -> Result<(), SatinError> {
    apply_from(config, |name| std::env::var(name).ok())
}

/// [`apply`] with the variables looked up by `var`.
fn apply_from(config: &mut Config, var: impl Fn(&str) -> Option<String>) -> Result<(), SatinError> {
    let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let bad = |name: &str, v: &str, what: &str| SatinError::Config(format!("{name}={v:?}: {what}"));
    if let Some(v) = get("SATIN_INLINE_DEPTH") {
        config.inline_depth = match v.trim() {
            "max" | "off" => usize::MAX,
            n => n
                .parse()
                .map_err(|_| bad("SATIN_INLINE_DEPTH", &v, "not a number, max or off"))?,
        };
    }
    if let Some(v) = get("SATIN_REDO_DEPTH") {
        config.redo_depth = match v.trim() {
            "max" | "unbounded" => usize::MAX,
            n => n
                .parse()
                .map_err(|_| bad("SATIN_REDO_DEPTH", &v, "not a number, max or unbounded"))?,
        };
    }
    if let Some(v) = get("SATIN_POLICY") {
        config.dist.policy =
            parse_policy(&v).map_err(|e| bad("SATIN_POLICY", &v, &e.to_string()))?;
    }
    if let Some(v) = get("SATIN_STEAL_BACKOFF_US") {
        let us: u64 = v
            .trim()
            .parse()
            .map_err(|_| bad("SATIN_STEAL_BACKOFF_US", &v, "not a number of microseconds"))?;
        config.dist.steal_backoff = Duration::from_micros(us);
    }
    if let Some(v) = get("SATIN_GUARD_PATIENCE_MS") {
        let ms: u64 = v.trim().parse().map_err(|_| {
            bad(
                "SATIN_GUARD_PATIENCE_MS",
                &v,
                "not a number of milliseconds",
            )
        })?;
        config.guard_patience = Duration::from_millis(ms);
    }
    let switch = |name: &str, v: &str| match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err(bad(name, v, "not 0 or 1")),
    };
    if let Some(v) = get("SATIN_SAVE_RESULTS") {
        config.dist.save_results = switch("SATIN_SAVE_RESULTS", &v)?;
    }
    if let Some(v) = get("SATIN_ADAPT") {
        config.dist.adapt.on = switch("SATIN_ADAPT", &v)?;
    }
    if let Some(v) = get("SATIN_ADAPT_PERIOD_MS") {
        let ms: u64 = v.trim().parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
            bad(
                "SATIN_ADAPT_PERIOD_MS",
                &v,
                "not a number of milliseconds > 0",
            )
        })?;
        config.dist.adapt.period = Duration::from_millis(ms);
    }
    for (name, field) in [
        ("SATIN_ADAPT_MIN_SIZE", &mut config.dist.adapt.min_size),
        ("SATIN_ADAPT_MAX_SIZE", &mut config.dist.adapt.max_size),
    ] {
        if let Some(v) = get(name) {
            *field = v
                .trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(name, &v, "not a number >= 1"))?;
        }
    }
    if let Some(v) = get("SATIN_CHECKPOINT_DIR") {
        config.dist.checkpoint_dir = Some(v.into());
    }
    if let Some(v) = get("SATIN_CHECKPOINT_INTERVAL_MS") {
        let ms: u64 = v.trim().parse().map_err(|_| {
            bad(
                "SATIN_CHECKPOINT_INTERVAL_MS",
                &v,
                "not a number of milliseconds",
            )
        })?;
        config.dist.checkpoint_interval = Duration::from_millis(ms);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use satin_core::Policy;

    fn with(vars: &[(&str, &str)]) -> Result<Config, SatinError> {
        let mut c = Config::default();
        apply_from(&mut c, |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })?;
        Ok(c)
    }

    #[test]
    fn unset_or_empty_variables_leave_the_defaults() {
        assert_eq!(with(&[]).unwrap(), Config::default());
        assert_eq!(
            with(&[("SATIN_POLICY", ""), ("SATIN_INLINE_DEPTH", " ")]).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn variables_set_their_settings() {
        let c = with(&[
            ("SATIN_INLINE_DEPTH", "7"),
            ("SATIN_REDO_DEPTH", "3"),
            ("SATIN_POLICY", "rs"),
            ("SATIN_STEAL_BACKOFF_US", "150"),
            ("SATIN_SAVE_RESULTS", "0"),
            ("SATIN_CHECKPOINT_DIR", "/tmp/ck"),
            ("SATIN_CHECKPOINT_INTERVAL_MS", "250"),
            ("SATIN_ADAPT", "on"),
            ("SATIN_ADAPT_PERIOD_MS", "300"),
            ("SATIN_ADAPT_MIN_SIZE", "2"),
            ("SATIN_ADAPT_MAX_SIZE", "5"),
        ])
        .unwrap();
        assert!(!c.dist.save_results);
        assert!(c.dist.adapt.on);
        assert_eq!(c.dist.adapt.period, Duration::from_millis(300));
        assert_eq!((c.dist.adapt.min_size, c.dist.adapt.max_size), (2, 5));
        assert_eq!(c.dist.checkpoint_dir, Some("/tmp/ck".into()));
        assert_eq!(c.dist.checkpoint_interval, Duration::from_millis(250));
        assert_eq!(c.inline_depth, 7);
        assert_eq!(c.redo_depth, 3);
        assert_eq!(c.dist.policy, Policy::Rs);
        assert_eq!(c.dist.steal_backoff, Duration::from_micros(150));
        assert_eq!(
            with(&[("SATIN_GUARD_PATIENCE_MS", "1500")])
                .unwrap()
                .guard_patience,
            Duration::from_millis(1500)
        );
        assert!(with(&[("SATIN_GUARD_PATIENCE_MS", "soon")]).is_err());
        assert_eq!(
            with(&[("SATIN_INLINE_DEPTH", "max")]).unwrap().inline_depth,
            usize::MAX
        );
        assert_eq!(
            with(&[("SATIN_INLINE_DEPTH", "off")]).unwrap().inline_depth,
            usize::MAX
        );
        assert_eq!(
            with(&[("SATIN_REDO_DEPTH", "unbounded")])
                .unwrap()
                .redo_depth,
            usize::MAX
        );
        assert_eq!(
            with(&[]).unwrap().redo_depth,
            crate::runtime::DEFAULT_REDO_DEPTH
        );
    }

    #[test]
    fn a_bad_value_is_an_error_naming_the_variable() {
        for (name, v) in [
            ("SATIN_INLINE_DEPTH", "deep"),
            ("SATIN_REDO_DEPTH", "-1"),
            ("SATIN_POLICY", "fastest"),
            ("SATIN_STEAL_BACKOFF_US", "-3"),
            ("SATIN_SAVE_RESULTS", "maybe"),
            ("SATIN_CHECKPOINT_INTERVAL_MS", "soon"),
            ("SATIN_ADAPT", "sometimes"),
            ("SATIN_ADAPT_PERIOD_MS", "0"),
            ("SATIN_ADAPT_MIN_SIZE", "0"),
            ("SATIN_ADAPT_MAX_SIZE", "many"),
        ] {
            match with(&[(name, v)]) {
                Err(SatinError::Config(m)) => assert!(m.contains(name), "{m}"),
                other => panic!("{name}={v}: {other:?}"),
            }
        }
    }
}
