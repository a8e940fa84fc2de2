//! The three serialization levels' reader on hostile bytes: the first bytes choose a
//! sequence of reads (scalars, arrays read in place and copied, objects), the rest is
//! the message. Every read either succeeds or fails with an error; nothing allocates
//! more than the message holds.
#![no_main]

use ipl_serialization::MessageReader;
use libfuzzer_sys::fuzz_target;

#[derive(serde::Deserialize, Debug)]
#[allow(dead_code)]
struct Job {
    id: u64,
    name: String,
    children: Vec<(u32, Option<f64>)>,
}

fuzz_target!(|data: &[u8]| {
    let (ops, msg) = data.split_at(data.len().min(8));
    let mut r = MessageReader::new(msg);
    for op in ops {
        let ok = match op % 12 {
            0 => r.read_u8().is_ok(),
            1 => r.read_i32().is_ok(),
            2 => r.read_u64().is_ok(),
            3 => r.read_f64().is_ok(),
            4 => r.read_bool().is_ok(),
            5 => r.read_char().is_ok(),
            6 => r.read_array_ref::<f64>().is_ok(),
            7 => r.read_array_vec::<u16>().is_ok(),
            8 => r.read_object::<Job>().is_ok(),
            9 => r.read_object::<Vec<String>>().is_ok(),
            10 => r.read_bytes_ref(usize::from(*op)).is_ok(),
            _ => r.skip(usize::from(*op)).is_ok(),
        };
        assert!(r.position() <= msg.len());
        if !ok {
            break;
        }
    }
});
