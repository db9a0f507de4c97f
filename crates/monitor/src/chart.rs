//! The last hour of a fleet, for the status page's chart: one point per
//! [`CHART_INTERVAL`], at most [`CHART_POINTS`] of them.

use serde::Serialize;
use std::collections::VecDeque;
use std::time::Duration;

/// Time between two points.
pub const CHART_INTERVAL: Duration = Duration::from_secs(10);
/// Points kept: one hour.
pub const CHART_POINTS: usize = 360;

/// One point of the chart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ChartPoint {
    /// Unix time, in seconds.
    pub t: i64,
    /// Instances the scaler holds (any state), requested ones included.
    pub instances: usize,
    /// Jobs wanting a slot: running plus waiting.
    pub demand: usize,
    /// Idle slots the policy asks for.
    pub idle_target: usize,
}

/// The points, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chart {
    points: VecDeque<ChartPoint>,
}

impl Chart {
    /// Adds `point` unless one was added less than [`CHART_INTERVAL`] before it.
    pub(crate) fn offer(&mut self, point: ChartPoint) {
        if let Some(last) = self.points.back()
            && point.t - last.t < CHART_INTERVAL.as_secs() as i64
        {
            return;
        }
        if self.points.len() == CHART_POINTS {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    pub(crate) fn points(&self) -> Vec<ChartPoint> {
        self.points.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: i64) -> ChartPoint {
        ChartPoint {
            t,
            instances: t as usize,
            demand: 0,
            idle_target: 0,
        }
    }

    #[test]
    fn one_point_per_interval_for_an_hour() {
        let mut c = Chart::default();
        c.offer(at(0));
        c.offer(at(5));
        c.offer(at(10));
        assert_eq!(c.points().iter().map(|p| p.t).collect::<Vec<_>>(), [0, 10]);
        for i in 2..1000 {
            c.offer(at(i * 10));
        }
        let p = c.points();
        assert_eq!(p.len(), CHART_POINTS);
        assert_eq!(p.last().unwrap().t, 9990);
        assert_eq!(p[0].t, 9990 - 10 * (CHART_POINTS as i64 - 1));
    }
}
