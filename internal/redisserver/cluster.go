package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Cluster is a Redis Cluster of redis-server processes on 127.0.0.1: masters
// that hold the 16384 hash slots between them, and replicas, the i-th of
// which replicates Masters[i] (until Failover swaps them).
type Cluster struct {
	Masters  []*Server
	Replicas []*Server
}

// clusterWait bounds each wait for the cluster to agree with itself.
const clusterWait = 20 * time.Second

// StartCluster starts a cluster of masters masters (at least 3, as Redis
// requires) and replicas replicas (at most masters), each a redis-server
// (Binary) in cluster mode on a free port, keeping nothing on disk but its
// node configuration. It joins the masters with redis-cli --cluster create
// (valkey-cli for valkey-server; the slots shared evenly), attaches each
// replica to its master, and returns once every node reports
// cluster_state:ok and every replica is in sync. redis-cli comes in the
// same package as redis-server; valkey-cli in valkey-tools, which
// valkey-server depends on.
func StartCluster(masters, replicas int) (*Cluster, error) {
	if masters < 3 || replicas < 0 || replicas > masters {
		return nil, fmt.Errorf("redisserver: a cluster of %d masters and %d replicas: want 3 or more masters, and no more replicas", masters, replicas)
	}
	cli, err := cliBinary()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(cli); err != nil {
		return nil, errors.New("redisserver: " + cli + " is not on PATH; it comes with " + Binary() + " (valkey-cli: in valkey-tools): " + InstallHint)
	}
	c := new(Cluster)
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	for i := range masters + replicas {
		s, err := Start(0, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
		if err != nil {
			return nil, err
		}
		if i < masters {
			c.Masters = append(c.Masters, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	create := []string{"--cluster", "create"}
	create = append(create, c.Addrs()...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, create...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redisserver: %s --cluster create: %w; its output:\n%s", cli, err, out)
	}
	for i, r := range c.Replicas {
		m := c.Masters[i]
		id, err := command(m.Addr, "CLUSTER", "MYID")
		if err != nil {
			return nil, err
		}
		if _, err := command(r.Addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(m.Port)); err != nil {
			return nil, err
		}
		// The replica must know the master before it can follow it.
		err = waitFor(func() (bool, error) {
			nodes, err := command(r.Addr, "CLUSTER", "NODES")
			return strings.Contains(nodes, id), err
		}, "node %s to learn of its master", r.Addr)
		if err != nil {
			return nil, err
		}
		if _, err := command(r.Addr, "CLUSTER", "REPLICATE", id); err != nil {
			return nil, err
		}
	}
	if err := c.wait(); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// Addrs returns the masters' addresses ("127.0.0.1:port"): enough for a
// cluster client to find every node.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, s := range c.Masters {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// Failover promotes Replicas[i] to master of Masters[i]'s slots with
// CLUSTER FAILOVER, a manual failover: the master stops taking writes until
// the replica has caught up with it, then they swap roles, losing nothing.
// It returns once both report their new roles and every node reports
// cluster_state:ok; Masters[i] and Replicas[i] are swapped.
func (c *Cluster) Failover(i int) error {
	if i < 0 || i >= len(c.Replicas) {
		return fmt.Errorf("redisserver: no replica %d", i)
	}
	r, m := c.Replicas[i], c.Masters[i]
	if _, err := command(r.Addr, "CLUSTER", "FAILOVER"); err != nil {
		return err
	}
	c.Masters[i], c.Replicas[i] = r, m
	return c.wait()
}

// wait waits until every master says it is one, every replica is in sync
// with its master, every node sees every other in its role (a manual
// failover needs the masters' votes, which they give only to a replica they
// know as one), and every node reports cluster_state:ok.
func (c *Cluster) wait() error {
	for _, s := range c.Masters {
		err := waitFor(func() (bool, error) {
			role, err := command(s.Addr, "ROLE")
			return role == "master", err
		}, "node %s to be a master", s.Addr)
		if err != nil {
			return err
		}
	}
	for _, s := range c.Replicas {
		err := waitFor(func() (bool, error) {
			info, err := command(s.Addr, "INFO", "replication")
			return strings.Contains(info, "master_link_status:up"), err
		}, "replica %s to be in sync", s.Addr)
		if err != nil {
			return err
		}
	}
	var want []string // a line of CLUSTER NODES for each node: its id and role
	for i, s := range c.Masters {
		id, err := command(s.Addr, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		want = append(want, id+" "+s.Addr+"@")
		if i < len(c.Replicas) {
			rid, err := command(c.Replicas[i].Addr, "CLUSTER", "MYID")
			if err != nil {
				return err
			}
			want = append(want, rid+" "+c.Replicas[i].Addr+"@", "slave "+id+" ")
		}
	}
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		err := waitFor(func() (bool, error) {
			nodes, err := command(s.Addr, "CLUSTER", "NODES")
			for _, w := range want {
				if !strings.Contains(nodes, w) {
					return false, err
				}
			}
			return err == nil, err
		}, "node %s to see every node in its role", s.Addr)
		if err != nil {
			return err
		}
		err = waitFor(func() (bool, error) {
			info, err := command(s.Addr, "CLUSTER", "INFO")
			return strings.Contains(info, "cluster_state:ok"), err
		}, "node %s to report cluster_state:ok", s.Addr)
		if err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every node and removes their directories.
func (c *Cluster) Stop() {
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		s.Stop()
	}
}

// waitFor calls done every 10 ms until it reports true, for clusterWait at
// most; what names what is awaited, for the error.
func waitFor(done func() (bool, error), what string, args ...any) error {
	var err error
	for deadline := time.Now().Add(clusterWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var ok bool
		if ok, err = done(); ok && err == nil {
			return nil
		}
	}
	return fmt.Errorf("redisserver: waited %v for %s (last error: %v)", clusterWait, fmt.Sprintf(what, args...), err)
}

// maxReply bounds what command reads of a reply.
const maxReply = 1 << 20

// command sends one command to the server at addr and returns its reply:
// a status, an integer or a bulk string as text; for an array (ROLE), its
// first element. An error reply is an error. It takes at most a second.
func command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(io.LimitReader(conn, maxReply)))
}

// readReply reads one RESP reply from r (see command).
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redisserver: an empty reply")
	}
	switch body := line[1:]; line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return "", errors.New("redisserver: " + body)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 || n > maxReply {
			return "", fmt.Errorf("redisserver: a bulk reply of length %q", body)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 1 {
			return "", fmt.Errorf("redisserver: an array reply of length %q", body)
		}
		return readReply(r) // the first element: all that ROLE is asked for
	}
	return "", fmt.Errorf("redisserver: a reply %q", line)
}
