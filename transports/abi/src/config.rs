//! The transport configuration text every plugin's `create` receives: `key=value` lines
//! (the user's lines, then `pool=`, `cluster=` and `secret=` from the IPL). Blank lines
//! and `#` comments are skipped; keys and values are trimmed. Unknown keys are for the
//! transport to ignore: the same text serves every transport of an Ibis instance.

use crate::TransportError;

/// The `(key, value)` pairs of a configuration text, in order; a line without `=` is an
/// [`InvalidArgument`](TransportError::InvalidArgument) error naming `transport` and
/// the line.
///
/// ```
/// use ipl_transport_abi::config::entries;
/// let e = entries("# comment\n pool = p1 \n\nmax_message=1024", "tcp").unwrap();
/// assert_eq!(e, vec![("pool", "p1"), ("max_message", "1024")]);
/// assert!(entries("oops", "tcp").unwrap_err().to_string().contains("tcp config"));
/// ```
pub fn entries<'a>(
    text: &'a str,
    transport: &str,
) -> Result<Vec<(&'a str, &'a str)>, TransportError> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| {
            TransportError::InvalidArgument(format!(
                "{transport} config: line {line:?} is not key=value"
            ))
        })?;
        out.push((key.trim(), value.trim()));
    }
    Ok(out)
}
