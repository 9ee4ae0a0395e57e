"""The nodes of AWS Batch multi-node parallel jobs, for the local cloud.

moto 5.2.5 registers a `multinode` job definition, but SubmitJob drops its
`nodeOverrides` and a job has no nodes: DescribeJobs knows only the parent.
AWS Batch runs a multi-node parallel (MNP) job as one container per node,
"each node ... its own instance", the main node first, and each node is a
job of its own whose id is the parent's with `#` and the node's index
(`JOBID#0`, `JOBID#1`, ...): "Multi-node parallel jobs", "Node groups" and
"Job lifecycle" of
https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html
and https://docs.aws.amazon.com/batch/latest/userguide/mnp-job-lifecycle.html.
A node's DescribeJobs answer has `nodeDetails` (`nodeIndex`, `isMainNode`)
and its container's `logStreamName`, `containerInstanceArn`, `taskArn` and
`networkInterfaces` (the private IPv4 address of the node's interface; MNP
jobs run in `awsvpc` mode, the interface attached to the node's instance):
JobDetail and ContainerDetail in
https://docs.aws.amazon.com/batch/latest/APIReference/API_DescribeJobs.html.
Each node's container logs to its own CloudWatch Logs stream (the default
log group /aws/batch/job, a stream per container:
https://docs.aws.amazon.com/batch/latest/userguide/using_awslogs.html), and
is told its place in the environment (AWS_BATCH_JOB_NODE_INDEX,
AWS_BATCH_JOB_NUM_NODES, AWS_BATCH_JOB_MAIN_NODE_INDEX,
AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:
https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html).

Here:
- SubmitJob keeps `nodeOverrides` (numNodes and each range's container
  overrides) of a job whose definition is `multinode`; the parent's
  `nodeProperties` say the submitted numNodes.
- Such a job gets its nodes, each placed on one EC2 instance of the queue's
  first compute environment (node N on the environment's Nth instance,
  launched with the environment's first instance type, subnet and security
  groups when it has fewer, as Batch scales a managed environment up for a
  job; a later job reuses them, as Batch reuses an environment's
  instances).
- The parent's DescribeJobs answer has no `container` (nor have its attempts: its
  nodes run the containers), and DescribeJobDefinitions shows a multinode definition's
  `nodeProperties` (moto left them out: cloud_batch_templates.py).
- DescribeJobs answers `JOBID#N` with the node's own detail: its status
  (the parent's: moto ends a job at once), nodeDetails, and its container
  (the range's command and environment with the overrides, the variables
  above, its own log stream, the instance's address as its interface's).
  ListJobs with `multiNodeJobId` lists the nodes.

The program a node's container runs is played by batch_compute.py (beside
this file), which writes each node's stream.

A node that dies mid-job (the fault table's `#N dies K`, read from the
file $FLOW_TEST_FAULTS names in this server's environment, as
batch_nodes.py reads it: node N dies in each of the next K multi-node
jobs). An instance's failure or termination is one way a Batch job
fails (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html);
its statusReason is then ECS's for a task whose host went away, "Host
EC2 (instance i-…) terminated." (the wording users' Batch jobs show and
their tools match; not quoted on an AWS page). "The final job status ...
is determined by the final job status of the main node", and "if a
child node dies, AWS Batch doesn't take any action on the other nodes":
the application must end the job (multi-node-parallel-jobs.html and
job-lifecycle.html, https://docs.aws.amazon.com/batch/latest/userguide/job-lifecycle.html).
A training does: its collectives fail on the lost peer, its main node's
container exits non-zero. Here node N's own job is FAILED with the
host's reason and its instance is terminated; the main node (and the
others, stopped as the job ends) FAILED with "Essential container in
task exited", the job's reason too (the host's when the main node is
the one that died). A managed compute environment launches a new
instance for the next job, as `_instances_for` does for an environment
short of running instances.

A node that hangs (`#N hangs K`: in each of the next K multi-node jobs;
`#N stalls K` the same, the training printing NCCL's warnings on):
its rank stops answering and the training on the main node waits on it
in a collective, printing no more (batch_training.py). Batch sees every
container running: the job stays RUNNING until it is terminated
(TerminateJob: "Terminates a job in a job queue. Jobs that are in the
STARTING or RUNNING state are terminated, which causes them to
transition to FAILED",
https://docs.aws.amazon.com/batch/latest/APIReference/API_TerminateJob.html),
then FAILED with the reason given, as are its nodes.
"""

import json
import os
import uuid

from moto.batch.models import Job
from moto.batch.responses import BatchResponse
from moto.ec2.models import ec2_backends


def _ranges_for(index, ranges):
    """The node ranges (`"0:"`, `"1:3"`, `"2"`) that hold node `index`."""
    out = []
    for r in ranges or []:
        target = str(r.get("targetNodes", "0:"))
        start, sep, end = target.partition(":")
        lo = int(start) if start else 0
        hi = (int(end) if end else None) if sep else lo
        if index >= lo and (hi is None or index <= hi):
            out.append(r)
    return out


def _container_of(job, index, num_nodes, main, main_ip):
    """The container node `index` runs: its range's, with the job's
    overrides of its range, and Batch's variables."""
    props = job.job_definition.node_properties or {}
    container = {}
    for r in _ranges_for(index, props.get("nodeRangeProperties")):
        container.update(r.get("container") or {})
    env = {e["name"]: e["value"] for e in container.get("environment") or []}
    command = list(container.get("command") or [])
    overrides = (job._flow_node_overrides or {}).get("nodePropertyOverrides")
    for o in _ranges_for(index, overrides):
        c = o.get("containerOverrides") or {}
        if c.get("command"):
            command = list(c["command"])
        for e in c.get("environment") or []:
            env[e["name"]] = e["value"]
    env.update(
        {
            "AWS_BATCH_JOB_ID": f"{job.job_id}#{index}",
            "AWS_BATCH_JOB_NODE_INDEX": str(index),
            "AWS_BATCH_JOB_NUM_NODES": str(num_nodes),
            "AWS_BATCH_JOB_MAIN_NODE_INDEX": str(main),
            "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": main_ip,
        }
    )
    return command, env


def _instances_for(backend, job, count):
    """`count` instances of the job's first compute environment, launched
    as needed (as a managed environment scales up for a job)."""
    envs = job.job_queue.environments
    if not envs:
        return []
    ce = envs[0]
    ec2 = ec2_backends[backend.account_id][backend.region_name]
    running = [i for i in ce.instances if i.state == "running"]
    res = ce.compute_resources or {}
    types = res.get("instanceTypes") or ["m5.large"]
    subnets = res.get("subnets") or []
    while len(running) < count:
        reservation = ec2.run_instances(
            image_id="ami-03cf127a",
            count=1,
            user_data=None,
            security_group_names=[],
            instance_type=types[0],
            region_name=backend.region_name,
            subnet_id=subnets[len(running) % len(subnets)] if subnets else None,
            key_name=res.get("ec2KeyPair", "AWS_OWNED"),
            # The launch template's groups where the environment names none
            # (cloud_batch_templates.py).
            security_group_ids=res.get("securityGroupIds") or getattr(ce, "_flow_template_groups", None) or [],
            is_instance_type_default=False,
        )
        instance = reservation.instances[0]
        ce.add_instance(instance)
        running.append(instance)
    return running[:count]


def _place_nodes(backend, job):
    """Gives a multi-node job its nodes: index, instance, container, stream."""
    props = job.job_definition.node_properties or {}
    num = int((job._flow_node_overrides or {}).get("numNodes") or props.get("numNodes") or 1)
    main = int(props.get("mainNode") or 0)
    instances = _instances_for(backend, job, num)
    ips = [i.private_ip for i in instances]
    main_ip = ips[main] if main < len(ips) else ""
    cluster = job.job_queue.environments[0].ecs_name if job.job_queue.environments else "batch"
    nodes = []
    for index in range(num):
        command, env = _container_of(job, index, num, main, main_ip)
        task = uuid.uuid5(uuid.NAMESPACE_URL, f"{job.job_id}#{index}").hex
        instance = instances[index] if index < len(instances) else None
        container_instance = uuid.uuid5(uuid.NAMESPACE_URL, instance.id if instance else task).hex
        nodes.append(
            {
                "index": index,
                "main": index == main,
                "command": command,
                "environment": env,
                "stream": f"{job.job_definition.name}/default/{task}",
                "task": f"arn:aws:ecs:{backend.region_name}:{backend.account_id}:task/{cluster}/{task}",
                "container_instance": f"arn:aws:ecs:{backend.region_name}:{backend.account_id}:container-instance/{cluster}/{container_instance}",
                "ip": instance.private_ip if instance else "",
                "instance": instance.id if instance else None,
            }
        )
    job._flow_nodes = nodes


# How many jobs each `dies` line of the fault table has struck:
# (table path, node key) -> count.
_DEATHS = {}


def _deaths(backend, job):
    """Lets the nodes the fault table says die in this job die: each its
    own job FAILED naming its instance, the instance terminated, the job
    FAILED (see the module's doc)."""
    import batch_nodes  # beside this file; reads $FLOW_TEST_FAULTS

    path = os.environ.get("FLOW_TEST_FAULTS", "")
    dead = []
    for node in job._flow_nodes or []:
        key = f"#{node['index']}"
        times = batch_nodes.faults_for([key]).get("dies")
        if not times or not times.isdigit() or _DEATHS.get((path, key), 0) >= int(times):
            continue
        _DEATHS[(path, key)] = _DEATHS.get((path, key), 0) + 1
        dead.append(node)
    if not dead:
        return
    ec2 = ec2_backends[backend.account_id][backend.region_name]
    for node in dead:
        instance = node.get("instance")
        node["reason"] = f"Host EC2 (instance {instance}) terminated."
        node["status"] = "FAILED"
        if instance:
            ec2.terminate_instances([instance])
    from moto.batch.models import JobStatus

    main = [n for n in dead if n["main"]]
    job.status = JobStatus.FAILED
    job.job_stopped_reason = main[0]["reason"] if main else "Essential container in task exited"


def _hangs(job):
    """Keeps the job RUNNING when the fault table says one of its nodes
    hangs (see the module's doc)."""
    import batch_nodes

    path = os.environ.get("FLOW_TEST_FAULTS", "")
    for node in job._flow_nodes or []:
        key = f"#{node['index']}"
        faults = batch_nodes.faults_for([key])
        kind = "hangs" if "hangs" in faults else "stalls"
        times = faults.get(kind)
        if not times or not times.isdigit() or _DEATHS.get((path, key, kind), 0) >= int(times):
            continue
        _DEATHS[(path, key, kind)] = _DEATHS.get((path, key, kind), 0) + 1
        from moto.batch.models import JobStatus

        job.status = JobStatus.RUNNING
        job.job_stopped = False
        job.job_stopped_at = None
        job._flow_hung = True
        return


def _node_detail(job, node):
    """DescribeJobs' answer for node `node` of `job`."""
    parent = job.describe()
    detail = {
        k: parent[k]
        for k in ("jobName", "status", "jobQueue", "jobDefinition", "createdAt", "startedAt", "stoppedAt", "statusReason", "tags")
        if k in parent
    }
    node_id = f"{job.job_id}#{node['index']}"
    detail.update(
        {
            "jobId": node_id,
            "jobArn": f"{job.arn}#{node['index']}",
            "nodeDetails": {"nodeIndex": node["index"], "isMainNode": node["main"]},
            "container": {
                "command": node["command"],
                "environment": [{"name": k, "value": v} for k, v in node["environment"].items()],
                "logStreamName": node["stream"],
                "containerInstanceArn": node["container_instance"],
                "taskArn": node["task"],
                "networkInterfaces": [{"attachmentId": f"eni-attach-{node['index']}", "privateIpv4Address": node["ip"]}],
            },
            "attempts": [],
        }
    )
    if node.get("status"):
        detail["status"] = node["status"]
        detail["statusReason"] = node["reason"]
    if detail.get("status") in ("SUCCEEDED", "FAILED"):
        detail["container"]["exitCode"] = 0 if detail["status"] == "SUCCEEDED" else 1
    return detail


def _node_of(backend, node_id):
    """(job, node) for `JOBID#N`, or None."""
    parent_id, _, index = node_id.partition("#")
    job = backend.get_job_by_id(parent_id)
    nodes = getattr(job, "_flow_nodes", None) if job else None
    if not nodes or not index.isdigit() or int(index) >= len(nodes):
        return None
    return job, nodes[int(index)]


def install():
    Job._flow_node_overrides = None
    Job._flow_nodes = None
    Job._flow_hung = False
    submit = BatchResponse.submitjob
    describe_jobs = BatchResponse.describejobs
    list_jobs = BatchResponse.listjobs
    describe = Job.describe

    def submitjob(self):
        answer = submit(self)
        job = self.batch_backend.get_job_by_id(json.loads(answer)["jobId"])
        if job is not None and job.job_definition.type == "multinode":
            job._flow_node_overrides = self._get_param("nodeOverrides") or {}
            _place_nodes(self.batch_backend, job)
            _deaths(self.batch_backend, job)
            _hangs(job)
        return answer

    def describejobs(self):
        wanted = self._get_param("jobs") or []
        nodes = [w for w in wanted if "#" in w]
        if not nodes:
            return describe_jobs(self)
        others = [w for w in wanted if "#" not in w]
        jobs = self.batch_backend.describe_jobs(others) if others else []
        for node_id in nodes:
            found = _node_of(self.batch_backend, node_id)
            if found:
                jobs.append(_node_detail(*found))
        return json.dumps({"jobs": jobs})

    def listjobs(self):
        parent = self._get_param("multiNodeJobId")
        if not parent:
            return list_jobs(self)
        job = self.batch_backend.get_job_by_id(parent)
        summaries = []
        for node in getattr(job, "_flow_nodes", None) or []:
            d = _node_detail(job, node)
            summaries.append(
                {
                    k: d[k]
                    for k in ("jobId", "jobArn", "jobName", "status", "createdAt", "startedAt", "stoppedAt", "jobDefinition")
                    if k in d
                }
                | {"nodeProperties": {"nodeIndex": node["index"], "isMainNode": node["main"]}}
            )
        return json.dumps({"jobSummaryList": summaries})

    def job_describe(self):
        out = describe(self)
        if self._flow_nodes and "nodeProperties" in out:
            out["nodeProperties"] = dict(out["nodeProperties"], numNodes=len(self._flow_nodes))
            # The parent of a multi-node job runs no container of its own:
            # its nodes do (JobDetail's `container`: "If the details are
            # for a multiple-node parallel job, this object doesn't apply",
            # API_DescribeJobs above). What it printed is in its nodes'
            # streams, the main node's first.
            out.pop("container", None)
            for attempt in out.get("attempts") or []:
                attempt.pop("container", None)
        return out

    terminate = BatchResponse.terminatejob

    def terminatejob(self):
        answer = terminate(self)
        job = self.batch_backend.get_job_by_id(self._get_param("jobId"))
        if job is not None and getattr(job, "_flow_hung", False) and not job.job_stopped:
            job.job_stopped_reason = self._get_param("reason")
            job._mark_stopped(success=False)
        return answer

    BatchResponse.terminatejob = terminatejob
    BatchResponse.submitjob = submitjob
    BatchResponse.describejobs = describejobs
    BatchResponse.listjobs = listjobs
    Job.describe = job_describe
