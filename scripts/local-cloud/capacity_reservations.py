"""EC2 capacity reservations for the local cloud: moto 5.2.5 has none, so a
`CapacityReservationTarget` (eksctl, pcluster, flow's node groups) cannot be
read against it. This adds two EC2 calls, answering in the shapes of AWS's
EC2 API reference (moto serialises them from botocore's model):

- CreateCapacityReservation (InstanceType, InstancePlatform,
  AvailabilityZone, InstanceCount, StartDate, EndDate, EndDateType,
  TagSpecifications): the reservation is `scheduled` until its StartDate,
  `active` until its EndDate, `expired` after.
- DescribeCapacityReservations (CapacityReservationIds): an unknown id is
  `InvalidCapacityReservationId.NotFound`, as AWS answers.

AWS sells capacity blocks through PurchaseCapacityBlock, which the local
cloud does not have: a test makes one with CreateCapacityReservation and
the tag `flow-local-cloud:reservation-type = capacity-block`, and it is
described with ReservationType `capacity-block`. The tag
`flow-local-cloud:id` gives the reservation the id a published file
already names (AWS chooses ids itself). Nothing launches into a
reservation here (AvailableInstanceCount stays InstanceCount).
"""

import datetime
import itertools

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

# (account, region) -> id -> reservation fields
_RESERVATIONS = {}
_IDS = itertools.count(1)
TYPE_TAG = "flow-local-cloud:reservation-type"
ID_TAG = "flow-local-cloud:id"


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _time(value):
    """A parameter's date as an aware UTC datetime (moto may hand it over
    parsed, without a zone, or as ISO 8601 text)."""
    if value is None:
        return None
    if not isinstance(value, datetime.datetime):
        value = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value


def _state(r):
    now = _now()
    if r["EndDate"] is not None and r["EndDate"] <= now:
        return "expired"
    if r["StartDate"] > now:
        return "scheduled"
    return "active"


def _described(r):
    out = {k: v for k, v in r.items() if v is not None and not k.startswith("_")}
    out["State"] = _state(r)
    return out


def create_capacity_reservation(self):
    tags = self._parse_tag_specification().get("capacity-reservation", {})
    count = self._get_int_param("InstanceCount")
    start = _time(self._get_param("StartDate")) or _now()
    end = _time(self._get_param("EndDate"))
    rid = tags.get(ID_TAG) or "cr-%017x" % next(_IDS)
    reservation = {
        "CapacityReservationId": rid,
        "OwnerId": self.current_account,
        "CapacityReservationArn": "arn:aws:ec2:%s:%s:capacity-reservation/%s"
        % (self.region, self.current_account, rid),
        "InstanceType": self._get_param("InstanceType"),
        "InstancePlatform": self._get_param("InstancePlatform"),
        "AvailabilityZone": self._get_param("AvailabilityZone"),
        "Tenancy": self._get_param("Tenancy") or "default",
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "EbsOptimized": False,
        "EphemeralStorage": False,
        "StartDate": start,
        "EndDate": end,
        "EndDateType": self._get_param("EndDateType")
        or ("limited" if end is not None else "unlimited"),
        "InstanceMatchCriteria": self._get_param("InstanceMatchCriteria") or "open",
        "CreateDate": _now(),
        "ReservationType": tags.get(TYPE_TAG, "default"),
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
    }
    _RESERVATIONS.setdefault((self.current_account, self.region), {})[rid] = reservation
    return ActionResult({"CapacityReservation": _described(reservation)})


def describe_capacity_reservations(self):
    mine = _RESERVATIONS.get((self.current_account, self.region), {})
    ids = self._get_param("CapacityReservationIds", [])
    for rid in ids:
        if rid not in mine:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                "The capacity reservation ID '%s' does not exist" % rid,
            )
    chosen = [mine[rid] for rid in ids] if ids else list(mine.values())
    return ActionResult({"CapacityReservations": [_described(r) for r in chosen]})


def install():
    """Adds the two calls to moto's EC2 API."""
    EC2Response.create_capacity_reservation = create_capacity_reservation
    EC2Response.describe_capacity_reservations = describe_capacity_reservations
