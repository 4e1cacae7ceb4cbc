"""A worker process's set-up: its environment, start-up phases, ports, devices and output."""
