package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ComposeTarget strikes the containers of docker compose services with
// the docker CLI:
//
//	kill       docker kill ID                    heal: docker start ID
//	pause      docker pause ID                   heal: docker unpause ID
//	partition  docker network disconnect NET ID  heal: docker network connect [--ip IP] [--alias A]... NET ID
//	restart    docker restart ID                 heal: nothing
//
// The containers are found once, by NewComposeTarget, from the labels
// compose gives them (com.docker.compose.project and .service).
type ComposeTarget struct {
	project    string
	services   []string
	containers map[string]string   // service -> container ID
	networks   map[string][]string // service -> networks, for partition
	// attach is, per service and network, the options that reconnect the
	// container as compose attached it: its fixed address and its aliases
	// (the service name, which the other containers resolve).
	attach map[string]map[string][]string
	run    Runner
	bin    string // the docker command

	struck struct {
		kind    FaultKind
		service string
	}
}

// ComposeOptions configure a ComposeTarget.
type ComposeOptions struct {
	// Project is the compose project name (docker compose -p). Required.
	Project string
	// Services are the services that may be struck. Required.
	Services []string
	// Networks are the networks a partition disconnects the container
	// from. Default: every network the container is on (docker inspect).
	Networks []string
	// Docker is the docker command. Default "docker".
	Docker string
	// Run runs the docker commands. Default ExecRunner.
	Run Runner
}

// NewComposeTarget resolves each service's container (it must have
// exactly one) and, without ComposeOptions.Networks, its networks.
func NewComposeTarget(ctx context.Context, o ComposeOptions) (*ComposeTarget, error) {
	if o.Project == "" || len(o.Services) == 0 {
		return nil, fmt.Errorf("%w: compose target: want a project and services", ErrInvalid)
	}
	if o.Docker == "" {
		o.Docker = "docker"
	}
	run := o.Run
	if run == nil {
		run = ExecRunner
	}
	t := &ComposeTarget{project: o.Project, services: slices.Clone(o.Services),
		containers: map[string]string{}, networks: map[string][]string{}, attach: map[string]map[string][]string{}, run: run, bin: o.Docker}
	for _, s := range o.Services {
		out, err := t.docker(ctx, "ps", "-aq", "--no-trunc",
			"--filter", "label=com.docker.compose.project="+o.Project,
			"--filter", "label=com.docker.compose.service="+s)
		if err != nil {
			return nil, fmt.Errorf("drill: find the container of service %s: %w", s, err)
		}
		ids := strings.Fields(string(out))
		if len(ids) != 1 {
			return nil, fmt.Errorf("%w: service %s of project %s has %d containers, want 1", ErrNoServer, s, o.Project, len(ids))
		}
		t.containers[s] = ids[0]
		out, err = t.docker(ctx, "inspect", "-f", "{{json .NetworkSettings.Networks}}", ids[0])
		if err != nil {
			return nil, fmt.Errorf("drill: networks of service %s: %w", s, err)
		}
		attach, err := parseNetworks(out, ids[0])
		if err != nil {
			return nil, fmt.Errorf("drill: networks of service %s: %w", s, err)
		}
		t.attach[s] = attach
		nets := o.Networks
		if len(nets) == 0 {
			for n := range attach {
				nets = append(nets, n)
			}
			slices.Sort(nets)
		}
		t.networks[s] = nets
	}
	return t, nil
}

// parseNetworks reads docker inspect's .NetworkSettings.Networks of
// container id: for each network, the options of docker network connect
// that attach the container again as it is (--ip of a fixed address,
// --alias of each alias but the container's own short ID).
func parseNetworks(js []byte, id string) (map[string][]string, error) {
	var nets map[string]struct {
		IPAMConfig *struct{ IPv4Address string }
		Aliases    []string
	}
	if err := json.Unmarshal(js, &nets); err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(nets))
	for name, n := range nets {
		var opts []string
		if n.IPAMConfig != nil && n.IPAMConfig.IPv4Address != "" {
			opts = append(opts, "--ip", n.IPAMConfig.IPv4Address)
		}
		for _, a := range n.Aliases {
			if !strings.HasPrefix(id, a) {
				opts = append(opts, "--alias", a)
			}
		}
		out[name] = opts
	}
	return out, nil
}

// Servers returns the service names.
func (t *ComposeTarget) Servers() []string { return slices.Clone(t.services) }

// Fault strikes service's container.
func (t *ComposeTarget) Fault(ctx context.Context, kind FaultKind, service string) error {
	id, ok := t.containers[service]
	if !ok {
		return fmt.Errorf("%w: no service %q", ErrNoServer, service)
	}
	var err error
	switch kind {
	case Kill:
		_, err = t.docker(ctx, "kill", id)
	case Pause:
		_, err = t.docker(ctx, "pause", id)
	case Partition:
		if len(t.networks[service]) == 0 {
			return fmt.Errorf("%w: service %s is on no network", ErrFault, service)
		}
		for _, n := range t.networks[service] {
			if _, err = t.docker(ctx, "network", "disconnect", n, id); err != nil {
				break
			}
		}
	case Restart:
		_, err = t.docker(ctx, "restart", id)
	default:
		return fmt.Errorf("%w: compose target cannot %s", ErrInvalid, kind)
	}
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrFault, kind, service, err)
	}
	t.struck.kind, t.struck.service = kind, service
	return nil
}

// Heal undoes the last fault.
func (t *ComposeTarget) Heal(ctx context.Context) error {
	kind, service := t.struck.kind, t.struck.service
	if service == "" {
		return nil
	}
	t.struck.kind, t.struck.service = 0, ""
	id := t.containers[service]
	var err error
	switch kind {
	case Kill:
		_, err = t.docker(ctx, "start", id)
	case Pause:
		_, err = t.docker(ctx, "unpause", id)
	case Partition:
		for _, n := range t.networks[service] {
			args := append(append([]string{"network", "connect"}, t.attach[service][n]...), n, id)
			if _, e := t.docker(ctx, args...); e != nil && err == nil {
				err = e
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%w: heal %s %s: %w", ErrFault, kind, service, err)
	}
	return nil
}

// docker runs a docker command.
func (t *ComposeTarget) docker(ctx context.Context, args ...string) ([]byte, error) {
	return t.run(ctx, t.bin, args...)
}
