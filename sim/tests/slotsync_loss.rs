//! The `slotsync` loss window over a sweep: zero with `synchronized_standby_slots`, and
//! measured (not hidden) without it.

use pgyard_sim::scenarios::slotsync::loss_window;

#[test]
fn loss_window_is_zero_with_the_gate_and_measured_without() {
    let (mut on, mut off, mut off_lossy, mut failovers) = (0u64, 0u64, 0u64, 0u64);
    for seed in 0..300 {
        let Some(loss) = loss_window(seed).expect("no violation") else {
            continue;
        };
        failovers += 1;
        if loss.gate_on {
            on += loss.total();
        } else {
            off += loss.total();
            off_lossy += u64::from(loss.total() > 0);
        }
    }
    println!(
        "slotsync over 300 seeds: {failovers} failovers; loss with the gate {on}, without it \
         {off} transactions in {off_lossy} failovers"
    );
    assert_eq!(on, 0);
    assert!(
        off > 0,
        "no seed without the gate lost anything: the window is not exercised"
    );
}
