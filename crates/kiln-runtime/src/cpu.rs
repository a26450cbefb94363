//! What the host CPU is, for benchmark reports and the default thread count.
//!
//! Needs nothing; never fails: unknown values fall back to "unknown CPU" and one thread.

/// The "model name" line of /proc/cpuinfo (Linux), e.g. "AMD EPYC 9654 96-Core Processor";
/// "unknown CPU" where it cannot be read.
pub fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| model_name_in(&text))
        .unwrap_or_else(|| "unknown CPU".to_string())
}

/// How many threads this process may run at once (cores, cgroup and affinity limits included);
/// at least 1.
pub fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn model_name_in(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        (key.trim() == "model name" && !value.is_empty()).then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_first_model_name_line() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: Some CPU  \n\
                    processor\t: 1\nmodel name\t: Other\n";
        assert_eq!(model_name_in(text).as_deref(), Some("Some CPU"));
        assert_eq!(model_name_in("processor : 0\n"), None);
    }

    #[test]
    fn host_answers_are_usable() {
        assert!(!cpu_model_name().is_empty());
        assert!(available_threads() >= 1);
    }
}
