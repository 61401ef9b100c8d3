//! Recording a call on the device (CUDA graphs) and replaying it.

use super::{dev, Device, LaunchError, Session};

impl<D: Device> Session<'_, D> {
    /// Records one execution on the device (a CUDA graph) so that [`Session::replay`] queues
    /// the whole call with one driver call: for decode-like steps repeated at the same sizes,
    /// where launching each kernel costs more than running it. The session executes once first
    /// (its storage allocated, every variant chosen at these sizes and addresses; that execution
    /// is a call, with its effects), then records. A replay reads the inputs where the session
    /// reads them: device tensors read in place take new values between replays. A call that
    /// reads results back on the host (data-dependent sizes: nonzero, `.item()`) cannot be
    /// recorded.
    pub fn capture(&mut self, dev_: &mut D) -> Result<(), LaunchError> {
        self.execute(dev_)?;
        self.check(dev_)?;
        let buffers = &self.exe.program.buffers;
        let name = |b: &guardless_ir::loop_ir::BufferId| {
            let buf = &buffers[b.index()];
            format!("{} ({})", buf.name, buf.origins.join(", "))
        };
        let mut why = Vec::new();
        if !self.host_step_buffers.is_empty() {
            let steps: Vec<String> = self.host_step_buffers.iter().map(name).collect();
            why.push(format!("it runs steps on the host: {}", steps.join("; ")));
        }
        if !self.syncs.is_empty() {
            let steps: Vec<String> = self.syncs.iter().map(name).collect();
            why.push(format!(
                "it reads data-dependent sizes back: {}",
                steps.join("; ")
            ));
        }
        if !why.is_empty() {
            return Err(LaunchError::Capture(why.join(", and ")));
        }
        if let Some(old) = self.recording.take() {
            dev_.drop_recording(old);
        }
        dev(dev_.begin_capture())?;
        let run = self.execute(dev_);
        let recording = dev(dev_.end_capture())?;
        match run {
            Ok(()) => {
                self.recording = Some(recording);
                Ok(())
            }
            Err(e) => {
                dev_.drop_recording(recording);
                Err(LaunchError::Capture(e.to_string()))
            }
        }
    }

    /// Queues the recorded call (see [`Session::capture`]).
    pub fn replay(&mut self, dev_: &mut D) -> Result<(), LaunchError> {
        let r = self
            .recording
            .ok_or_else(|| LaunchError::Capture("nothing recorded: call capture first".into()))?;
        dev(dev_.replay(r))
    }
}
