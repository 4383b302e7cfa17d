"""The engine every command runs on: cells as tasks, worker processes on a GPU pool with a watchdog, the sweep that
writes rows as they land, and the layer runner."""
