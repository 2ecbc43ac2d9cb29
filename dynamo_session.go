package shardlease

// The DynamoStore's sessions (see lease_session.go). A session lives on the
// worker row ("stream:@owner"): session_gen (N), the generation;
// lease_counter, bumped by every open and keep; lease_duration (N, ms), the
// holder's; session_mail (SS), lease keys left for the holder. Each
// operation is one request: the session's cost is one write a keep,
// whatever the number of leases it keeps.

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

var _ SessionStore = (*DynamoStore)(nil)

// sessionRecordSet is the SET clause that records on a lease row that
// session keeps it, filling :sess, :sgen and :sdur in vals: the session's
// worker row key, its generation, and "session" in lease_duration, with
// the holder's lease duration d when it is known ("session:10000"), so that
// a taker that never saw the session's row still waits the holder's out.
func sessionRecordSet(vals map[string]types.AttributeValue, session Worker, d time.Duration) string {
	vals[":sess"] = str(session.Key())
	vals[":sgen"] = num(session.Gen)
	vals[":sdur"] = str(sessionDuration)
	if d > 0 {
		vals[":sdur"] = str(sessionDuration + ":" + strconv.FormatInt(d.Milliseconds(), 10))
	}
	return attrSession + " = :sess, " + attrSessionGen + " = :sgen, " + attrDuration + " = :sdur"
}

// workerCorrupt turns a ValidationException of a write to worker row w,
// whose update reads its counter, into an ErrCorruptLease error naming the
// row; other errors are returned as they are.
func workerCorrupt(w Worker, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
		return errorf("%w: worker row %q: %w; delete the row (its worker opens its session again)", ErrCorruptLease, w.Key(), err)
	}
	return err
}

// decodeSessionRow decodes item, read or written as w's worker row.
func decodeSessionRow(item map[string]types.AttributeValue, w Worker) (Worker, error) {
	got, _, err := decodeWorker(item, w.Stream)
	if err == nil && got.Owner != w.Owner {
		err = errorf("%w: worker row %q came back as the row of owner %q", ErrCorruptLease, w.Key(), got.Owner)
	}
	return got, err
}

// OpenSession implements SessionStore with one unconditional UpdateItem.
func (s *DynamoStore) OpenSession(ctx context.Context, stream, owner string) (Worker, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return Worker{}, s.fail("open session", workerKey(w), err)
	}
	vals := map[string]types.AttributeValue{":owner": str(owner), ":g": num(newSessionGen()), ":zero": num(0), ":one": num(1), ":empty": emptyMap()}
	// Entries of earlier generations stay for the claims of their leases.
	set := "SET lease_owner = :owner, " + attrSessionGen + " = :g, lease_counter = if_not_exists(lease_counter, :zero) + :one, " + attrPacked + " = if_not_exists(" + attrPacked + ", :empty)"
	remove := " REMOVE " + attrSessionMail + ", " + attrSessionEnd
	if d := HolderLeaseDuration(ctx); d > 0 {
		set += ", " + attrDuration + " = :dur"
		vals[":dur"] = durationAttr(d)
	} else {
		remove += ", " + attrDuration
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(workerKey(w)),
		UpdateExpression:          aws.String(set + remove),
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return Worker{}, s.fail("open session", workerKey(w), workerCorrupt(w, err))
	}
	got, err := decodeSessionRow(out.Attributes, w)
	if err != nil {
		return Worker{}, s.fail("open session", workerKey(w), err)
	}
	return got, nil
}

// KeepSession implements SessionStore with one UpdateItem conditional on
// the generation, which returns the row as it was: its mail comes back
// with the write that clears it.
func (s *DynamoStore) KeepSession(ctx context.Context, sess Worker) (Worker, []string, error) {
	if err := checkSession(ctx, sess); err != nil {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), err)
	}
	return s.keepPacked(ctx, sess, nil, nil)
}

// keepRefused is the error of a keep of sess whose condition failed: the
// row is gone or holds another generation, as the failure shows it (or, when
// it carries no item, one consistent read).
func (s *DynamoStore) keepRefused(ctx context.Context, sess Worker, cf *types.ConditionalCheckFailedException) error {
	item := cf.Item
	if len(item) == 0 {
		out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyAttr(workerKey(sess)), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return errorf("%w: worker row %q no longer holds generation %d, and reading it failed: %w; stop handing records of its leases and open a new session", ErrLeaseLost, sess.Key(), sess.Gen, err)
		}
		item = out.Item
	}
	if len(item) == 0 || endedRow(item) {
		return sessionLost(sess, false, 0)
	}
	row, _ := decodeSessionRow(item, sess)
	return sessionLost(sess, true, row.Gen)
}

// ReadSession implements SessionStore with one eventually consistent
// GetItem.
func (s *DynamoStore) ReadSession(ctx context.Context, stream, owner string) (Worker, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return Worker{}, s.fail("read session", workerKey(w), err)
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyAttr(workerKey(w)), ConsistentRead: aws.Bool(false)})
	if err != nil {
		return Worker{}, s.fail("read session", workerKey(w), err)
	}
	if len(out.Item) == 0 || endedRow(out.Item) {
		return Worker{}, s.fail("read session", workerKey(w), ErrLeaseNotFound)
	}
	got, err := decodeSessionRow(out.Item, w)
	if err != nil {
		return Worker{}, s.fail("read session", workerKey(w), err)
	}
	return got, nil
}

// FenceSession implements SessionStore with one DeleteItem conditional on
// the counter and the generation seen. When the condition fails, the row
// as the failure returns it (or, when it carries none, one consistent
// read) tells a session over already from one kept since.
func (s *DynamoStore) FenceSession(ctx context.Context, sess Worker) (bool, error) {
	if err := checkSession(ctx, sess); err != nil {
		return false, s.fail("fence session", workerKey(sess), err)
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 keyAttr(workerKey(sess)),
		ConditionExpression:                 aws.String("lease_counter = :c AND " + attrSessionGen + " = :g AND attribute_not_exists(" + attrSessionEnd + ") AND " + noEntries),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":c": num(sess.Counter), ":g": num(sess.Gen), ":zero": num(0)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	cf, failed := condFailed(err)
	switch {
	case err == nil:
		return true, nil
	case !failed:
		return false, s.fail("fence session", workerKey(sess), err)
	}
	item := cf.Item
	if len(item) == 0 {
		out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyAttr(workerKey(sess)), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return false, s.fail("fence session", workerKey(sess), errorf("the fence's condition failed and reading the row failed: %w", err))
		}
		item = out.Item
	}
	if len(item) == 0 || endedRow(item) {
		return true, nil // gone or ended: fenced already
	}
	row, err := decodeSessionRow(item, sess)
	if err != nil {
		return false, s.fail("fence session", workerKey(sess), err)
	}
	switch {
	case row.Gen != sess.Gen:
		return true, nil // another generation: over already
	case row.Counter != sess.Counter:
		return false, nil // kept since it was seen: the session lives
	}
	// The row carries packed checkpoints: it ends rather than goes.
	ended, err := s.endSession(ctx, row)
	if err != nil {
		return false, s.fail("fence session", workerKey(sess), err)
	}
	return ended, nil
}

// MailSession implements SessionStore with one UpdateItem that adds lease
// to the row's mail, conditional on the generation.
func (s *DynamoStore) MailSession(ctx context.Context, sess Worker, lease LeaseKey) (bool, error) {
	if err := checkSession(ctx, sess); err != nil {
		return false, s.fail("mail session", workerKey(sess), err)
	}
	if err := lease.Validate(); err != nil {
		return false, s.fail("mail session", workerKey(sess), err)
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.table),
		Key:                 keyAttr(workerKey(sess)),
		ConditionExpression: aws.String(attrSessionGen + " = :g AND attribute_not_exists(" + attrSessionEnd + ")"),
		UpdateExpression:    aws.String("ADD " + attrSessionMail + " :m"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":g": num(sess.Gen), ":m": &types.AttributeValueMemberSS{Value: []string{lease.String()}},
		},
	})
	if _, ok := condFailed(err); ok {
		return false, nil
	}
	if err != nil {
		return false, s.fail("mail session", workerKey(sess), workerCorrupt(sess, err))
	}
	return true, nil
}

// AcquireInSession implements SessionStore: Acquire (the same reservation,
// condition, incarnation check, lost-reply recognition and legacy
// adoption), with the session's record written by the same UpdateItem.
func (s *DynamoStore) AcquireInSession(ctx context.Context, key LeaseKey, sess Worker, observed int64) (Lease, error) {
	if err := checkSession(ctx, sess); err != nil {
		return Lease{}, s.fail("acquire", key, err)
	}
	return s.acquireIn(ctx, key, sess.Owner, observed, &sess)
}
