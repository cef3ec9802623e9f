"""XID error names for the `err_msg` label of DCGM_FI_DEV_XID_ERRORS, and the tracker that
remembers each GPU's last XID from NVML's event stream."""

from __future__ import annotations

import logging
import threading

from kubegpu.nvml import Nvml, NvmlError

log = logging.getLogger(__name__)

NO_ERROR = "No Error"
UNKNOWN = "Unknown Error"

# Short names of well-known XIDs, after NVIDIA's public XID catalogue.
NAMES: dict[int, str] = {
    0: NO_ERROR,
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    56: "Display Engine error",
    57: "Error programming video memory interface",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link corrected error",
    140: "Unrecovered ECC Error",
}


def xid_name(xid: int) -> str:
    return NAMES.get(xid, UNKNOWN)


class XidTracker:
    """Follows NVML's XID events in a thread; `last(index)` is the GPU's latest XID (0: none)."""

    def __init__(self, nvml: Nvml, poll_s: float = 1.0) -> None:
        self.nvml = nvml
        self.poll_s = poll_s
        self._last: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def last(self, index: int) -> int:
        with self._lock:
            return self._last.get(index, 0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="xid-events", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Tell the thread to end, without waiting (see `stop`)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_s + 5)  # a wait returns within poll_s
            self._thread = None

    def _follow(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                event = self.nvml.wait_for_event(self.poll_s)
            except Exception as exc:  # never let the event thread die; say so once
                if not failing:
                    words = (
                        str(exc) if isinstance(exc, NvmlError) else f"{type(exc).__name__}: {exc}"
                    )
                    log.warning("cannot read XID events (retrying): %s", words)
                    if not isinstance(exc, NvmlError):
                        log.debug("XID event thread", exc_info=exc)
                failing = True
                self._stop.wait(5 * self.poll_s)
                continue
            if failing:
                log.info("XID events can be read again")
            failing = False
            if event is not None:
                log.info("GPU %d: Xid %d (%s)", event.device_index, event.xid, xid_name(event.xid))
                with self._lock:
                    self._last[event.device_index] = event.xid
